'use strict';
/*
 * The approver's page (clients/node/approver) in headless Chromium
 * (Debian's chromium, driven by playwright-core): a card appears with what
 * an approver decides on, approving it streams the run's output and shows
 * its tool call, a denial and the database's refusals reach the page, and
 * a card's text is never HTML.  Prints "ok - ..." / "not ok - ..." lines
 * (test/suites/clients.sh counts them).
 *
 * Environment: APPROVER_URL (the server, behind no proxy: this script sets
 * the identity header itself, as the platform's proxy would), SANDBOX_ORG,
 * SANDBOX_WORKSPACE, SANDBOX_MODEL, DATABASE_URL (the requester's login),
 * APPROVER_HEADER, CHROMIUM.
 */
const path = require('path');
const top = path.resolve(__dirname, '../..');
const { chromium } = require(path.join(top, 'clients/node/node_modules/playwright-core'));
const { Client } = require(path.join(top, 'clients/node'));

const URL_ = process.env.APPROVER_URL;
const HEADER = process.env.APPROVER_HEADER || 'X-Forwarded-User';
let failures = 0;
function expect(what, ok, got) {
	console.log(`${ok ? 'ok' : 'not ok'} - ${what}${ok || got === undefined ? '' : `: got ${JSON.stringify(got)}`}`);
	if (!ok) failures++;
}

async function main() {
	const c = new Client({ org: process.env.SANDBOX_ORG, workspace: process.env.SANDBOX_WORKSPACE,
		connectionString: process.env.DATABASE_URL, poll: 1000 });
	const [agent, conv] = await c.tx(async (q) => {
		const a = (await q.query("SELECT agent.create_agent('Page agent', 'specialist', $1, 'alice@example.com', code_execution_enabled => true) AS id",
			[process.env.SANDBOX_MODEL])).rows[0].id;
		const v = (await q.query("SELECT agent.create_conversation($1, 'alice@example.com', 'page', code_execution_enabled => true) AS id", [a])).rows[0].id;
		return [a, v];
	});

	// Without the identity header the server answers nothing but 401.
	const bare = await fetch(URL_);
	expect('without the identity header the page is refused (401)', bare.status === 401, bare.status);

	const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
		args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'] });
	try {
		const context = await browser.newContext({ extraHTTPHeaders: { [HEADER]: 'bob@example.com' } });
		const page = await context.newPage();
		const dialogs = [];
		page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss(); });
		await page.goto(URL_);
		await page.waitForFunction(() => document.getElementById('me').textContent === 'bob@example.com');
		expect('the page names the approver the proxy set', true);

		// A card appears, live, with what the approver decides on.
		const code = [
			'import time',
			'# count to three, slowly',
			'print("first line", flush=True)',
			'time.sleep(1.5)',
			'print("second line", flush=True)',
			'open("report.txt", "w").write("done")',
		].join('\n');
		const run = await c.request({ agent, conversation: conv, language: 'python', code,
			requestedBy: 'alice@example.com', description: 'Count <img src=x onerror=alert(1)> slowly' });
		const card = page.locator(`article[data-approval="${run.approvalId}"]`);
		await card.waitFor({ timeout: 30000 });
		expect('the new card appears on the open page without a reload', true);
		const text = await card.innerText();
		expect('... with its language', /Language\s+python/.test(text), text);
		expect('... its runtime (the interpreter\'s version)', /Runtime\s+python3 3\.\d+/.test(text), text);
		expect('... what the run may reach on the network', /Network\s+nothing \(no network\)/.test(text), text);
		expect('... its image', /Image\s+host/.test(text), text);
		expect('... its isolation class and why a person decides', /Isolation\s+namespaces/.test(text) && /Why a person\s+\S/.test(text), text);
		expect('... its cost and the org\'s balance', /Cost\s+2 credits/.test(text) && /Balance\s+\d+ credits/.test(text), text);
		expect('... and the code, as it will run', (await card.locator('pre.code').innerText()) === code);
		expect('... highlighted: keywords, comments, strings', await card.locator('pre.code span.kw').count() >= 2
			&& await card.locator('pre.code span.com').count() === 1 && await card.locator('pre.code span.str').count() >= 3);
		expect('the description is shown as text, never as HTML',
			(await card.locator('img').count()) === 0 && text.includes('<img src=x onerror=alert(1)>'), text);

		// Approve: the output streams, then the result and the tool call.
		await card.locator('button.approve').click();
		const runEl = page.locator(`article[data-invocation="${run.invocationId}"]`);
		await runEl.locator('.output').filter({ hasText: 'first line' }).waitFor({ timeout: 30000 });
		const state = await c.state(run);
		expect('after approval the first line shows while the run still runs (streamed)',
			['provisioning', 'running'].includes(state) && !(await runEl.innerText()).includes('second line'), state);
		expect('the card left the inbox', (await card.count()) === 0);
		await runEl.locator('.toolcall').waitFor({ timeout: 60000 });
		const result = await c.wait(run, 5);
		const runText = await runEl.innerText();
		expect('the run\'s whole output is on the page', runText.includes('first line') && runText.includes('second line'), runText);
		expect('its end shows: succeeded, exit code 0', (await runEl.getAttribute('data-state')) === 'succeeded' && /Exit code\s+0/.test(runText), runText);
		expect('the tool call shows (the database\'s id)', result.toolCallId !== null && runText.includes(result.toolCallId), [result.toolCallId, runText]);
		expect('... with the file the run wrote', /report\.txt \(saved, 4 B\)/.test(runText), runText);
		const decided = await c.card(run.approvalId);
		expect('the approval is recorded as the logged-in approver', decided.status === 'approved' && decided.decidedBy === 'bob@example.com', [decided.status, decided.decidedBy]);

		// Deny, with a reason.
		const run2 = await c.request({ agent, conversation: conv, language: 'shell', code: 'rm -rf /workspace/*', requestedBy: 'alice@example.com' });
		const card2 = page.locator(`article[data-approval="${run2.approvalId}"]`);
		await card2.waitFor({ timeout: 30000 });
		expect('a shell card is highlighted as shell', await card2.locator('pre.code[data-language="shell"]').count() === 1);
		await card2.locator('input').fill('not on my watch');
		await card2.locator('button.deny').click();
		await card2.waitFor({ state: 'detached', timeout: 30000 });
		const d2 = await c.card(run2.approvalId);
		expect('deny: recorded with the approver and the reason', d2.status === 'denied' && d2.decidedBy === 'bob@example.com' && d2.decisionReason === 'not on my watch', d2);

		// The database's refusals reach the card: bob may not approve his own request.
		const run3 = await c.request({ agent, conversation: conv, language: 'node', code: 'console.log(1)', requestedBy: 'bob@example.com' });
		const card3 = page.locator(`article[data-approval="${run3.approvalId}"]`);
		await card3.waitFor({ timeout: 30000 });
		await card3.locator('button.approve').click();
		await card3.locator('.status.error').waitFor({ timeout: 30000 });
		const err = await card3.locator('.status.error').innerText();
		expect('approving one\'s own request shows the database\'s refusal (42501) and keeps the card', err.startsWith('42501') && (await card3.count()) === 1, err);
		expect('... and nothing was approved', (await c.card(run3.approvalId)).status === 'pending');

		// A decision must be a same-origin JSON POST: a deny (which anyone
		// may make) forged from another site leaves the card pending.
		const forgedJson = await fetch(`${URL_}api/deny`, { method: 'POST',
			headers: { [HEADER]: 'bob@example.com', 'content-type': 'application/json', origin: 'http://evil.example' },
			body: JSON.stringify({ approvalId: run3.approvalId }) });
		expect('a JSON POST from another origin is refused (403)', forgedJson.status === 403, forgedJson.status);
		const forgedForm = await fetch(`${URL_}api/deny`, { method: 'POST',
			headers: { [HEADER]: 'bob@example.com', 'content-type': 'application/x-www-form-urlencoded' },
			body: `approvalId=${run3.approvalId}` });
		expect('a form POST is refused (403)', forgedForm.status === 403, forgedForm.status);
		expect('... and the card is still pending', (await c.card(run3.approvalId)).status === 'pending');

		// A card decided elsewhere (cancelled by the backend) leaves the page.
		await c.cancel(run3, 'alice@example.com', 'changed my mind');
		await card3.waitFor({ state: 'detached', timeout: 30000 });
		expect('a card cancelled elsewhere leaves the page', true);

		expect('no script ran from a card (no dialog)', dialogs.length === 0, dialogs);
	} finally {
		await browser.close();
		await c.close();
	}
	console.log(`approver page: ${failures === 0 ? 'done' : `${failures} failed`}`);
	process.exit(failures ? 1 : 0);
}
main().catch((e) => { console.log(`not ok - the page test ran to its end: ${e && e.stack}`); process.exit(1); });
