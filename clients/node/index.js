'use strict';
/*
 * A tenant-scoped client of sandbox_ext's SQL API (node-postgres).
 *
 * It calls only the documented API (docs/reference.md, execution.md,
 * sessions.md), as agent_backend for one tenant: each call is one short
 * transaction on a pooled connection that starts with
 * agent.set_tenant(org, workspace), so the database's row-level security
 * decides what the client sees, never the client.  Calls may run
 * concurrently (each takes a connection of the pool).
 *
 * Streaming follows execution.md, "Streaming": a notification is a hint
 * and nothing more (whoever learns a channel can NOTIFY on it), so on each
 * one, and every `poll` ms without one, the client reads the state, then
 * the output after the last chunk it has, and stops when agent.is_terminal()
 * says the state is final.  Notifications arrive on one more connection of
 * the client's own (LISTEN only), made when first needed.
 *
 * Types: JSDoc here, checked with `npm run typecheck` (tsc --checkJs);
 * index.d.ts is what TypeScript users import.
 */
const pg = require('pg');

/**
 * @typedef {{ invocationId: string, approvalId: string | null, status: string, replayed: boolean }} Run
 *   A run handle: what request() returns.  status is the request's then
 *   (pending_approval; on a replay of an idempotency key, the invocation's
 *   state); replayed: an earlier request with the same key was returned.
 * @typedef {{ seq: number, stream: 'stdout' | 'stderr', data: string }} Chunk
 * @typedef {{
 *   invocationId: string, state: string, finished: boolean, stateReason: string | null,
 *   exitCode: number | null, stdout: string, stderr: string, outputTruncated: boolean,
 *   creditsCharged: number, toolCallId: string | null, outputPreview: string | null,
 *   files: Array<Record<string, unknown>>, succeeded: boolean
 * }} Result
 *   What wait() returns: state when the wait ended; finished, whether that
 *   state is final (false: the timeout passed first and the run goes on);
 *   exitCode, the payload's (null when it did not exit); succeeded, state
 *   is 'succeeded'.
 * @typedef {{
 *   approvalId: string, invocationId: string, status: string, title: string,
 *   agentName: string | null, conversationId: string | null, language: string,
 *   runtime: string | null, riskLevel: string | null, description: string | null,
 *   code: string | null, codeSha256: string, codeLines: number | null, requestedBy: string,
 *   createdAt: Date, expiresAt: Date | null, decidedBy: string | null, decidedAt: Date | null,
 *   decisionReason: string | null, creditsCost: number | null, orgBalance: number | null,
 *   egressMayReach: string | null, egressSha256: string | null, image: string | null,
 *   imageDigest: string | null, approvalPolicyId: string | null, allowanceId: string | null,
 *   approvedByPolicy: string | null, personNeeded: string | null, isolation: string | null
 * }} Card
 * @typedef {{
 *   id: string, name: string, origin: string, status: string, reason: string | null,
 *   size: number | null, sha256: string | null, contentType: string | null,
 *   invocationId: string | null, createdAt: Date, current: boolean
 * }} FileInfo
 * @typedef {{ name: string, contentType: string | null, size: number, sha256: string, content: Buffer }} Download
 * @typedef {{
 *   agent: string, conversation?: string | null, language: string, code: string,
 *   requestedBy: string, description?: string | null, idempotencyKey?: string | null,
 *   wallTimeS?: number | null, memoryMb?: number | null, image?: string | null
 * }} RequestOptions
 * @typedef {{
 *   org: string, workspace: string, connectionString?: string,
 *   pool?: pg.PoolConfig, poll?: number
 * }} ClientOptions
 */

/** An error of the SQL API: its SQLSTATE and the product's message, detail and hint. */
class SandboxError extends Error {
	/**
	 * @param {string | null} sqlstate
	 * @param {string} message
	 * @param {string | null} [detail]
	 * @param {string | null} [hint]
	 */
	constructor(sqlstate, message, detail = null, hint = null) {
		super(message);
		this.name = 'SandboxError';
		this.sqlstate = sqlstate;
		this.detail = detail;
		this.hint = hint;
	}

	/** @param {any} e */
	static from(e) {
		if (e instanceof SandboxError) return e;
		const err = new SandboxError(typeof e?.code === 'string' && /^[0-9A-Z]{5}$/.test(e.code) ? e.code : null,
			String(e?.message ?? e), e?.detail ?? null, e?.hint ?? null);
		err.cause = e;
		return err;
	}
}

/**
 * A request the policy refused (request_execution's status 'denied'):
 * sqlstate is the refusal's, reason its code; it was audited and committed.
 */
class Refused extends SandboxError {
	/** @param {string | null} sqlstate @param {string} reason */
	constructor(sqlstate, reason) {
		super(sqlstate, reason);
		this.name = 'Refused';
		this.reason = reason;
	}
}

/** A wait that ran out of time (the run goes on). */
class TimeoutError extends Error {
	/** @param {string} message */
	constructor(message) {
		super(message);
		this.name = 'TimeoutError';
	}
}

const CARD_COLUMNS = ['approval_id', 'invocation_id', 'status', 'title', 'agent_name', 'conversation_id',
	'language', 'runtime', 'risk_level', 'description', 'code', 'code_sha256', 'code_lines', 'requested_by',
	'created_at', 'expires_at', 'decided_by', 'decided_at', 'decision_reason', 'credits_cost', 'org_balance',
	'egress_may_reach', 'egress_sha256', 'image', 'image_digest', 'approval_policy_id', 'allowance_id',
	'approved_by_policy', 'person_needed', 'isolation'];
const FILE_COLUMNS = ['id', 'name', 'origin', 'status', 'reason', 'size', 'sha256', 'content_type',
	'invocation_id', 'created_at', 'current'];

/** @param {string} s */
const camel = (s) => s.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
/** @param {any} v */
const num = (v) => (v === null || v === undefined ? null : Number(v));

/** @param {Record<string, any>} r @returns {Card} */
function toCard(r) {
	/** @type {Record<string, any>} */
	const c = {};
	for (const k of CARD_COLUMNS) c[camel(k)] = r[k];
	c.orgBalance = num(r.org_balance);
	c.creditsCost = num(r.credits_cost);
	return /** @type {Card} */ (c);
}

/** @param {Record<string, any>} r @returns {FileInfo} */
function toFile(r) {
	/** @type {Record<string, any>} */
	const f = {};
	for (const k of FILE_COLUMNS) f[camel(k)] = r[k];
	f.size = num(r.size);
	return /** @type {FileInfo} */ (f);
}

/** @param {Run | string} run */
const invocationId = (run) => (typeof run === 'string' ? run : run.invocationId);
/** @param {Card | string} card */
const approvalId = (card) => (typeof card === 'string' ? card : card.approvalId);

/** The LISTEN connection: which channels were notified, and who waits for which. */
class Listener {
	/** @param {pg.Client} conn */
	constructor(conn) {
		this.conn = conn;
		/** @type {Set<string>} */
		this.notified = new Set();
		/** @type {Map<string, number>} */
		this.listening = new Map();
		/** @type {Map<string, Set<() => void>>} */
		this.waiters = new Map();
		conn.on('notification', (n) => {
			const w = this.waiters.get(n.channel);
			if (w && w.size) for (const wake of [...w]) wake();
			else this.notified.add(n.channel);
		});
	}

	/** @param {string} channel */
	async listen(channel) {
		const n = this.listening.get(channel) ?? 0;
		this.listening.set(channel, n + 1);
		if (n === 0) await this.conn.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
	}

	/** @param {string} channel */
	async unlisten(channel) {
		const n = (this.listening.get(channel) ?? 1) - 1;
		if (n > 0) { this.listening.set(channel, n); return; }
		this.listening.delete(channel);
		this.notified.delete(channel);
		await this.conn.query(`UNLISTEN ${pg.escapeIdentifier(channel)}`).catch(() => undefined);
	}

	/** Until `channel` is notified or `ms` pass (a hint either way). @param {string} channel @param {number} ms */
	wait(channel, ms) {
		if (this.notified.delete(channel)) return Promise.resolve();
		return new Promise((resolve) => {
			let set = this.waiters.get(channel);
			if (!set) this.waiters.set(channel, (set = new Set()));
			const s = set;
			const done = () => { clearTimeout(timer); s.delete(done); resolve(undefined); };
			const timer = setTimeout(done, Math.max(0, ms));
			s.add(done);
		});
	}
}

/** The API for one tenant (org, workspace), as agent_backend. */
class Client {
	/** @param {ClientOptions} opts */
	constructor(opts) {
		if (!opts || !opts.org || !opts.workspace) throw new TypeError('org and workspace are required');
		this.org = opts.org;
		this.workspace = opts.workspace;
		this.poll = opts.poll ?? 5000;
		/** @type {pg.ClientConfig} */
		this.config = { ...(opts.pool ?? {}), ...(opts.connectionString ? { connectionString: opts.connectionString } : {}) };
		this.pool = new pg.Pool({ max: 4, ...this.config });
		// An idle connection the server drops must not take the process down.
		this.pool.on('error', () => undefined);
		/** @type {Promise<Listener> | null} */
		this.listener = null;
	}

	async close() {
		if (this.listener) {
			const l = await this.listener.catch(() => null);
			this.listener = null;
			if (l) await l.conn.end().catch(() => undefined);
		}
		await this.pool.end();
	}

	/**
	 * One transaction for the tenant; a database error becomes a SandboxError.
	 * @template T
	 * @param {(c: pg.PoolClient) => Promise<T>} fn
	 * @returns {Promise<T>}
	 */
	async tx(fn) {
		let c;
		try {
			c = await this.pool.connect();
		} catch (e) {
			throw SandboxError.from(e);
		}
		try {
			await c.query('BEGIN');
			await c.query('SELECT agent.set_tenant($1, $2)', [this.org, this.workspace]);
			const r = await fn(c);
			await c.query('COMMIT');
			return r;
		} catch (e) {
			await c.query('ROLLBACK').catch(() => undefined);
			throw SandboxError.from(e);
		} finally {
			c.release();
		}
	}

	/** @param {string} sql @param {unknown[]} params @returns {Promise<any>} */
	async one(sql, params) {
		return this.tx(async (c) => {
			const r = await c.query({ text: sql, values: params, rowMode: 'array' });
			return r.rows[0][0];
		});
	}

	/** @returns {Promise<Listener>} */
	listen() {
		if (!this.listener) {
			const conn = new pg.Client(this.config);
			conn.on('error', () => undefined);
			this.listener = conn.connect().then(() => new Listener(conn), (e) => {
				this.listener = null;
				throw SandboxError.from(e);
			});
		}
		return this.listener;
	}

	// ---- requests and approvals -------------------------------------------------

	/**
	 * agent.request_execution(): a run handle, pending approval.  A refusal of
	 * policy rejects with Refused (its SQLSTATE and reason), after the commit
	 * that keeps its audit event.
	 * @param {RequestOptions} o
	 * @returns {Promise<Run>}
	 */
	async request(o) {
		const r = await this.tx((c) => c.query(
			`SELECT invocation_id, approval_id, status, reason, sqlstate, replayed
			   FROM agent.request_execution($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			[this.workspace, o.agent, o.conversation ?? null, o.language, o.code, o.requestedBy,
				o.description ?? null, o.idempotencyKey ?? null, o.wallTimeS ?? null, o.memoryMb ?? null,
				o.image ?? null]));
		const row = r.rows[0];
		if (row.status === 'denied') throw new Refused(row.sqlstate, row.reason);
		return { invocationId: row.invocation_id, approvalId: row.approval_id, status: row.status, replayed: !!row.replayed };
	}

	/**
	 * agent.approve(); given a Card, binds the approval to the hash of the
	 * code that card showed.  Resolves to the invocation id.
	 * @param {Card | string} card @param {string} approver @param {string | null} [codeSha256]
	 * @returns {Promise<string>}
	 */
	approve(card, approver, codeSha256 = null) {
		const sha = codeSha256 ?? (typeof card === 'string' ? null : card.codeSha256);
		return this.one('SELECT agent.approve($1, $2, $3)', [approvalId(card), approver, sha]);
	}

	/** agent.deny(); resolves to the invocation id. @param {Card | string} card @param {string} approver @param {string | null} [reason] @returns {Promise<string>} */
	deny(card, approver, reason = null) {
		return this.one('SELECT agent.deny($1, $2, $3)', [approvalId(card), approver, reason]);
	}

	/** agent.cancel(): 'cancelled' (not started) or 'cancelling'. @param {Run | string} run @param {string} actor @param {string | null} [reason] @returns {Promise<string>} */
	cancel(run, actor, reason = null) {
		return this.one('SELECT agent.cancel($1, $2, $3)', [invocationId(run), actor, reason]);
	}

	/** The workspace's pending cards, oldest first (the inbox). @returns {Promise<Card[]>} */
	async pending() {
		const r = await this.tx((c) => c.query(`SELECT ${CARD_COLUMNS.join(', ')} FROM agent.pending_approvals()`));
		return r.rows.map(toCard);
	}

	/** One card, whatever its status. @param {Card | string} card @returns {Promise<Card>} */
	async card(card) {
		const r = await this.tx((c) => c.query(`SELECT ${CARD_COLUMNS.join(', ')} FROM agent.approval_card($1)`, [approvalId(card)]));
		return toCard(r.rows[0]);
	}

	/**
	 * Pending cards as a stream, for approvers: those waiting now, then each
	 * new one as it arrives, each once.  Ends after `timeout` ms (default:
	 * never; break out of the loop, or abort `signal`, to stop).
	 * @param {{ timeout?: number, signal?: AbortSignal }} [opts]
	 * @returns {AsyncGenerator<Card, void, undefined>}
	 */
	async *cards(opts = {}) {
		const channel = await this.one('SELECT agent.approvals_channel()', []);
		const l = await this.listen();
		await l.listen(channel);          // before the first read: nothing is missed
		const deadline = opts.timeout === undefined ? null : Date.now() + opts.timeout;
		/** @type {Set<string>} */
		const seen = new Set();
		try {
			for (;;) {
				for (const c of await this.pending()) {
					if (!seen.has(c.approvalId)) {
						seen.add(c.approvalId);
						yield c;
					}
				}
				if (opts.signal?.aborted) return;
				const left = deadline === null ? this.poll : Math.min(this.poll, deadline - Date.now());
				if (left <= 0) return;
				await l.wait(channel, left);
			}
		} finally {
			await l.unlisten(channel);
		}
	}

	// ---- runs: state, output, wait ------------------------------------------------

	/** The invocation's state now. @param {Run | string} run @returns {Promise<string>} */
	state(run) {
		return this.one("SELECT agent.wait($1, '0 s')", [invocationId(run)]);
	}

	/** Whether a state is final (agent.is_terminal; an unknown state is 22023). @param {string} state @returns {Promise<boolean>} */
	isTerminal(state) {
		return this.one('SELECT agent.is_terminal($1)', [state]);
	}

	/** The output stored so far after a sequence number. @param {Run | string} run @param {number} [afterSeq] @returns {Promise<Chunk[]>} */
	async output(run, afterSeq = 0) {
		const r = await this.tx((c) => c.query('SELECT seq, stream, data FROM agent.read_output($1, $2)', [invocationId(run), afterSeq]));
		return r.rows;
	}

	/**
	 * The run's output as it is stored, until its state is final.  Rejects
	 * with TimeoutError when `timeout` ms pass first (the run goes on).
	 * @param {Run | string} run
	 * @param {{ timeout?: number, afterSeq?: number, signal?: AbortSignal }} [opts]
	 * @returns {AsyncGenerator<Chunk, void, undefined>}
	 */
	async *chunks(run, opts = {}) {
		const inv = invocationId(run);
		const channel = await this.one('SELECT agent.output_channel($1)', [inv]);
		const l = await this.listen();
		await l.listen(channel);          // before the first read: nothing is missed
		const deadline = opts.timeout === undefined ? null : Date.now() + opts.timeout;
		let seq = opts.afterSeq ?? 0;
		try {
			for (;;) {
				// The state first, then the output: the finish commits after the
				// last output row, so a final state means all of it is there.
				const [final, rows] = await this.tx(async (c) => {
					const s = await c.query("SELECT agent.is_terminal(s) AS final FROM agent.wait($1, '0 s') s", [inv]);
					const o = await c.query('SELECT seq, stream, data FROM agent.read_output($1, $2)', [inv, seq]);
					return [s.rows[0].final, o.rows];
				});
				for (const r of rows) {
					seq = r.seq;
					yield r;
				}
				if (final || opts.signal?.aborted) return;
				const left = deadline === null ? this.poll : Math.min(this.poll, deadline - Date.now());
				if (left <= 0) throw new TimeoutError(`invocation ${inv} is not finished after ${opts.timeout} ms`);
				await l.wait(channel, left);
			}
		} finally {
			await l.unlisten(channel);
		}
	}

	/**
	 * Call onStdout / onStderr with each piece of output as it is stored,
	 * until the run ends; then its Result.
	 * @param {Run | string} run
	 * @param {((data: string) => void) | null} [onStdout]
	 * @param {((data: string) => void) | null} [onStderr]
	 * @param {{ timeout?: number }} [opts]
	 * @returns {Promise<Result>}
	 */
	async stream(run, onStdout, onStderr, opts = {}) {
		for await (const c of this.chunks(run, opts)) {
			const cb = c.stream === 'stdout' ? onStdout : onStderr;
			if (cb) cb(c.data);
		}
		return this.wait(run, 0);
	}

	/**
	 * agent.wait_result(): wait up to `timeoutSeconds` for the end, then the
	 * state, the whole output and the tool call in one call.
	 * result.finished is false when the timeout passed first.
	 * @param {Run | string} run @param {number} [timeoutSeconds]
	 * @returns {Promise<Result>}
	 */
	async wait(run, timeoutSeconds = 30) {
		const r = await this.tx((c) => c.query(
			`SELECT invocation_id, state, finished, state_reason, exit_code, stdout, stderr,
			        output_truncated, credits_charged, tool_call_id, output_preview, files
			   FROM agent.wait_result($1, make_interval(secs => $2::float8))`, [invocationId(run), timeoutSeconds]));
		const x = r.rows[0];
		return {
			invocationId: x.invocation_id, state: x.state, finished: !!x.finished, stateReason: x.state_reason,
			exitCode: x.exit_code, stdout: x.stdout ?? '', stderr: x.stderr ?? '', outputTruncated: !!x.output_truncated,
			creditsCharged: x.credits_charged ?? 0, toolCallId: x.tool_call_id, outputPreview: x.output_preview,
			files: x.files ?? [], succeeded: x.state === 'succeeded',
		};
	}

	// ---- files ---------------------------------------------------------------------

	/**
	 * agent.upload_file(): the new file's id (in /workspace/<name> at the next run).
	 * @param {string} conversation @param {string} name @param {Buffer | string} content
	 * @param {string} uploadedBy @param {string | null} [contentType]
	 * @returns {Promise<string>}
	 */
	upload(conversation, name, content, uploadedBy, contentType = null) {
		const bytes = typeof content === 'string' ? Buffer.from(content, 'utf8') : content;
		return this.one('SELECT agent.upload_file($1, $2, $3, $4, $5)', [conversation, name, bytes, uploadedBy, contentType]);
	}

	/** agent.list_files(). @param {string} conversation @returns {Promise<FileInfo[]>} */
	async files(conversation) {
		const r = await this.tx((c) => c.query(`SELECT ${FILE_COLUMNS.join(', ')} FROM agent.list_files($1)`, [conversation]));
		return r.rows.map(toFile);
	}

	/** agent.download_file(). @param {FileInfo | string} file @returns {Promise<Download>} */
	async download(file) {
		const id = typeof file === 'string' ? file : file.id;
		const r = await this.tx((c) => c.query('SELECT name, content_type, size, sha256, content FROM agent.download_file($1)', [id]));
		const x = r.rows[0];
		return { name: x.name, contentType: x.content_type, size: Number(x.size), sha256: x.sha256, content: x.content };
	}

	/** agent.delete_file(): the bytes freed. @param {string} conversation @param {string} name @param {string} deletedBy @returns {Promise<number>} */
	async deleteFile(conversation, name, deletedBy) {
		return Number(await this.one('SELECT agent.delete_file($1, $2, $3)', [conversation, name, deletedBy]));
	}
}

module.exports = { Client, SandboxError, Refused, TimeoutError };
