/*-------------------------------------------------------------------------
 *
 * log.c
 *	  sandbox-egress: what the proxy tells the jail.  One JSON line per
 *	  connection attempt on the log fd (at most EGRESS_LOG_MAX_ROWS, then
 *	  counted as dropped), the run's counters those lines feed, and the one
 *	  summary line at the end of the run on the summary fd.
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <string.h>

#include "proxy.h"

/* JSON string body: our texts and normalised hosts; escape anyway. */
void
proxy_json_str(char *out, size_t len, const char *s)
{
	size_t		o = 0;

	for (; *s && o + 7 < len; s++)
	{
		unsigned char c = *s;

		if (c == '"' || c == '\\')
		{
			out[o++] = '\\';
			out[o++] = c;
		}
		else if (c < 0x20 || c > 0x7e)
			o += snprintf(out + o, len - o, "\\u%04x", c);
		else
			out[o++] = c;
	}
	out[o] = '\0';
}

/* The connection's log line, and the run's counters. */
void
proxy_conn_log(Conn *c)
{
	char		line[4096],
				host[1600],
				reason[1600],
				secret[300];
	int			n;

	proxy_json_str(host, sizeof(host), c->host);
	proxy_json_str(reason, sizeof(reason), c->reason);
	/* the secret put in or blocked: its name, never a value */
	if (c->secret[0])
	{
		snprintf(secret, sizeof(secret), ",\"secret\":\"");
		proxy_json_str(secret + strlen(secret), sizeof(secret) - strlen(secret) - 2, c->secret);
		strcat(secret, "\"");
	}
	else
		secret[0] = '\0';
	pthread_mutex_lock(&proxy.lock);
	proxy.n_attempts++;
	if (c->allowed)
		proxy.n_allowed++;
	else
		proxy.n_denied++;
	if (proxy.n_log_rows >= EGRESS_LOG_MAX_ROWS)
	{
		proxy.n_log_dropped++;
		pthread_mutex_unlock(&proxy.lock);
		return;
	}
	proxy.n_log_rows++;
	n = snprintf(line, sizeof(line),
				 "{\"seq\":%llu,\"kind\":\"%s\",\"host\":\"%s\",\"port\":%u,"
				 "\"address\":%s%s%s,\"decision\":\"%s\",\"rule\":%s%s%s,"
				 "\"reason\":%s%s%s,\"bytes_up\":%llu,\"bytes_down\":%llu,\"ms\":%llu%s}\n",
				 (unsigned long long) proxy.n_log_rows,
				 c->mode == MODE_CONNECT ? "connect" : "http", host, c->port,
				 c->address[0] ? "\"" : "", c->address[0] ? c->address : "null",
				 c->address[0] ? "\"" : "",
				 c->allowed ? "allowed" : "denied",
				 c->rule ? "\"" : "", c->rule ? c->rule : "null", c->rule ? "\"" : "",
				 c->reason[0] ? "\"" : "", c->reason[0] ? reason : "null",
				 c->reason[0] ? "\"" : "",
				 (unsigned long long) c->up, (unsigned long long) c->down,
				 (unsigned long long) (proxy_now_ms() - c->started), secret);
	if (proxy.log_fd >= 0 && n > 0 && (size_t) n < sizeof(line))
		(void) proxy_write_all(proxy.log_fd, line, n);
	pthread_mutex_unlock(&proxy.lock);
}


/*
 * The run's summary line on the summary fd (at the end of the run).  The
 * caller holds proxy.lock, so that no connection's line lands between the
 * counters read here and the end.
 */
void
proxy_write_summary(void)
{
	char		line[512];
	int			n;

	n = snprintf(line, sizeof(line),
				 "{\"attempts\":%llu,\"allowed\":%llu,\"denied\":%llu,\"bytes_up\":%llu,"
				 "\"bytes_down\":%llu,\"limit_hit\":%s,\"log_rows\":%llu,\"log_dropped\":%llu}\n",
				 (unsigned long long) proxy.n_attempts, (unsigned long long) proxy.n_allowed,
				 (unsigned long long) proxy.n_denied, (unsigned long long) proxy.bytes_up,
				 (unsigned long long) proxy.bytes_down, proxy.limit_hit ? "true" : "false",
				 (unsigned long long) proxy.n_log_rows, (unsigned long long) proxy.n_log_dropped);
	if (proxy.summary_fd >= 0)
		(void) proxy_write_all(proxy.summary_fd, line, n);
}
