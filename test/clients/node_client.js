'use strict';
/*
 * clients/node against the real cluster, supervisor, jail and interpreters,
 * as a backend uses it: request, the approvers' card stream, approve,
 * async iteration over the output, wait, timeouts, cancel, files, errors,
 * concurrent calls and another tenant's view.  Prints "ok - ..." /
 * "not ok - ..." lines (test/suites/clients.sh counts them).
 *
 * Environment: DATABASE_URL (a login granted agent_backend), SANDBOX_ORG,
 * SANDBOX_WORKSPACE, SANDBOX_MODEL (tenant A), SANDBOX_ORG_B,
 * SANDBOX_WORKSPACE_B (tenant B).  NODE_CLIENT: the installed package
 * (default: clients/node in this tree).
 */
const crypto = require('crypto');
const path = require('path');
const { Client, SandboxError, Refused, TimeoutError } =
	require(process.env.NODE_CLIENT || path.resolve(__dirname, '../../clients/node'));

let failures = 0;
function expect(what, ok, got) {
	console.log(`${ok ? 'ok' : 'not ok'} - ${what}${ok || got === undefined ? '' : `: got ${JSON.stringify(got)}`}`);
	if (!ok) failures++;
}
async function rejects(what, sqlstate, fn) {
	try {
		await fn();
	} catch (e) {
		expect(what, e instanceof SandboxError && e.sqlstate === sqlstate, [e && e.sqlstate, e && e.message]);
		return;
	}
	expect(what, false, 'no error');
}
const sha = (s) => crypto.createHash('sha256').update(s).digest('hex');

async function main() {
	const url = process.env.DATABASE_URL;
	const a = new Client({ org: process.env.SANDBOX_ORG, workspace: process.env.SANDBOX_WORKSPACE, connectionString: url, poll: 1000 });
	const b = new Client({ org: process.env.SANDBOX_ORG_B, workspace: process.env.SANDBOX_WORKSPACE_B, connectionString: url, poll: 1000 });
	const [agent, conv] = await a.tx(async (q) => {
		const ag = (await q.query("SELECT agent.create_agent('Node client', 'specialist', $1, 'alice@example.com', code_execution_enabled => true, file_upload_enabled => true) AS id",
			[process.env.SANDBOX_MODEL])).rows[0].id;
		const cv = (await q.query("SELECT agent.create_conversation($1, 'alice@example.com', 'node', code_execution_enabled => true) AS id", [ag])).rows[0].id;
		return [ag, cv];
	});

	// files in
	const data = Buffer.from('a,b\n1,2\n');
	const fid = await a.upload(conv, 'in.csv', data, 'alice@example.com');
	const listed = await a.files(conv);
	expect('upload(): listed with its size and sha256', listed.length === 1 && listed[0].id === fid && listed[0].size === data.length
		&& listed[0].sha256 === sha(data) && listed[0].origin === 'uploaded', listed);
	await rejects('upload(): a name with .. is 22023', '22023', () => a.upload(conv, '../x', 'x', 'alice@example.com'));

	// request, the card stream, approve
	const code = "const fs = require('fs');\nconsole.log('lines', fs.readFileSync('in.csv', 'utf8').trim().split('\\n').length);\n"
		+ "setTimeout(() => { console.error('warn'); fs.writeFileSync('out.txt', 'node!'); console.log('end'); }, 1500);\n";
	const run = await a.request({ agent, conversation: conv, language: 'node', code, requestedBy: 'alice@example.com' });
	expect('request(): a run handle pending approval', run.status === 'pending_approval' && typeof run.approvalId === 'string', run);
	const cards = a.cards({ timeout: 30000 });
	const first = (await cards.next()).value;
	expect('cards(): the pending card first, with code, hash, runtime, cost and balance',
		first && first.approvalId === run.approvalId && first.code === code && first.codeSha256 === sha(code)
		&& /^node \d+\./.test(first.runtime ?? '') && first.creditsCost === 2 && typeof first.orgBalance === 'number', first);
	const later = await a.request({ agent, conversation: null, language: 'shell', code: 'echo later', requestedBy: 'alice@example.com' });
	const second = (await cards.next()).value;
	expect('cards(): a card requested meanwhile arrives on the stream', second && second.approvalId === later.approvalId, second);
	await cards.return(undefined);
	await rejects('approve(): the requester herself is 42501', '42501', () => a.approve(first, 'alice@example.com'));
	await rejects('approve(): another hash is 22023', '22023', () => a.approve(first.approvalId, 'bob@example.com', '0'.repeat(64)));
	expect('approve(card): returns the invocation', (await a.approve(first, 'bob@example.com')) === run.invocationId);

	// async iteration over the output
	const chunks = [];
	let live = null;
	for await (const ch of a.chunks(run, { timeout: 60000 })) {
		if (chunks.length === 0) live = await a.state(run);
		chunks.push(ch);
	}
	expect('chunks(): the first chunk arrives while the run runs', ['provisioning', 'running'].includes(live), live);
	expect('chunks(): each stream whole and in order',
		chunks.filter((c) => c.stream === 'stdout').map((c) => c.data).join('') === 'lines 2\nend\n'
		&& chunks.filter((c) => c.stream === 'stderr').map((c) => c.data).join('') === 'warn\n', chunks);
	const r = await a.wait(run, 10);
	expect('wait(): succeeded, finished, exit 0, charged 2', r.state === 'succeeded' && r.finished && r.exitCode === 0
		&& r.succeeded && r.creditsCharged === 2, r);
	expect('wait(): the tool call with the produced file', r.toolCallId !== null && r.files.some((f) => f.name === 'out.txt'), r);
	const produced = (await a.files(conv)).find((f) => f.name === 'out.txt');
	const dl = produced ? await a.download(produced) : null;
	expect('download(): the produced bytes', dl !== null && dl.content.toString() === 'node!' && dl.sha256 === sha('node!'), dl);

	// stream() with callbacks, two runs at once on one client
	await a.approve(second, 'bob@example.com');
	const par = await a.request({ agent, conversation: null, language: 'python', code: 'print("py")', requestedBy: 'alice@example.com' });
	await a.approve(par.approvalId, 'bob@example.com');
	const outs = { later: '', par: '' };
	const [r1, r2] = await Promise.all([
		a.stream(later, (d) => { outs.later += d; }, null, { timeout: 60000 }),
		a.stream(par, (d) => { outs.par += d; }, null, { timeout: 60000 }),
	]);
	expect('stream(): two runs streamed at once, each its own output', outs.later === 'later\n' && outs.par === 'py\n'
		&& r1.state === 'succeeded' && r2.state === 'succeeded', [outs, r1.state, r2.state]);

	// failures, timeouts, cancel
	const bad = await a.request({ agent, conversation: null, language: 'python', code: 'import sys; sys.exit(4)', requestedBy: 'alice@example.com' });
	await a.approve(bad.approvalId, 'bob@example.com');
	const rb = await a.wait(bad, 60);
	expect('a failing run: failed, exit code 4', rb.state === 'failed' && rb.exitCode === 4 && !rb.succeeded, rb);
	const slow = await a.request({ agent, conversation: null, language: 'shell', code: 'sleep 30', requestedBy: 'alice@example.com', wallTimeS: 1 });
	await a.approve(slow.approvalId, 'bob@example.com');
	const rs = await a.wait(slow, 60);
	expect('a run past its wall time: timed_out, no exit code', rs.state === 'timed_out' && rs.finished && rs.exitCode === null, rs);
	const long = await a.request({ agent, conversation: null, language: 'shell', code: 'echo begun; sleep 30', requestedBy: 'alice@example.com' });
	await a.approve(long.approvalId, 'bob@example.com');
	const rl = await a.wait(long, 0.5);
	expect('wait(timeout): not finished, the state then', !rl.finished && ['approved', 'provisioning', 'running'].includes(rl.state), rl);
	let timedOut = false;
	try {
		for await (const _ of a.chunks(long, { timeout: 1000 })) { /* drain */ }
	} catch (e) {
		timedOut = e instanceof TimeoutError;
	}
	expect('chunks({timeout}): rejects with TimeoutError while the run goes on', timedOut && !(await a.isTerminal(await a.state(long))));
	// The caller stops following (AbortSignal): the iteration ends, the run
	// goes on, and the client listens on nothing any more.
	const ac = new AbortController();
	const seen = [];
	for await (const ch of a.chunks(long, { signal: ac.signal })) {
		seen.push(ch.data);
		ac.abort();
	}
	const listener = await a.listener;
	expect('chunks({signal}): an abort ends the iteration; the run goes on; nothing is left listening',
		seen.join('') === 'begun\n' && !(await a.isTerminal(await a.state(long))) && listener !== null && listener.listening.size === 0,
		[seen, listener && [...listener.listening.keys()]]);
	expect('cancel(): a run in flight is cancelling', (await a.cancel(long, 'alice@example.com', 'stop')) === 'cancelling');
	const rc = await a.wait(long, 60);
	expect('... and ends cancelled, charged', rc.state === 'cancelled' && rc.creditsCharged === 2, rc);
	await rejects('cancel(): a finished run is 55000', '55000', () => a.cancel(long, 'alice@example.com'));

	// deny, refusals, errors
	const d = await a.request({ agent, conversation: null, language: 'shell', code: 'echo no', requestedBy: 'alice@example.com' });
	await a.deny(d.approvalId, 'bob@example.com', 'no');
	const rd = await a.wait(d, 0);
	expect('deny(): denied, final, uncharged', rd.state === 'denied' && rd.finished && rd.creditsCharged === 0, rd);
	let refused = null;
	try {
		await a.request({ agent, conversation: null, language: 'python', code: '', requestedBy: 'alice@example.com' });
	} catch (e) {
		refused = e;
	}
	expect('a refused request rejects with Refused, its SQLSTATE and reason (empty code: 22023)',
		refused instanceof Refused && refused.sqlstate === '22023' && refused.reason !== '', refused && [refused.sqlstate, refused.reason]);
	let bogus = null;
	try { await a.isTerminal('succeded'); } catch (e) { bogus = e; }
	expect('isTerminal(): a misspelt state is 22023 with the product\'s message and detail',
		bogus instanceof SandboxError && bogus.sqlstate === '22023' && bogus.message === 'unknown invocation state "succeded"'
		&& (bogus.detail ?? '').startsWith('The states are'), bogus && [bogus.sqlstate, bogus.message]);

	// another tenant
	await rejects('tenant B: A\'s run is P0002', 'P0002', () => b.state(run));
	await rejects('tenant B: A\'s output is P0002', 'P0002', () => b.output(run));
	await rejects('tenant B: A\'s stream is P0002', 'P0002', async () => { for await (const _ of b.chunks(run, { timeout: 5000 })) { /* */ } });
	await rejects('tenant B: A\'s file is P0002', 'P0002', () => b.download(fid));
	const pend = await a.request({ agent, conversation: null, language: 'shell', code: 'echo a', requestedBy: 'alice@example.com' });
	await rejects('tenant B: approving A\'s card is P0002', 'P0002', () => b.approve(pend.approvalId, 'mallory@example.com'));
	expect('tenant B: its inbox holds none of A\'s cards', !(await b.pending()).some((c) => c.approvalId === pend.approvalId));
	await a.cancel(pend, 'alice@example.com');

	await a.close();
	await b.close();
	console.log(`node client: ${failures === 0 ? 'done' : `${failures} failed`}`);
	process.exit(failures ? 1 : 0);
}
main().catch((e) => { console.log(`not ok - the Node client test ran to its end: ${e && e.stack}`); process.exit(1); });
