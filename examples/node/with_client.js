'use strict';
/*
 * The flow of run_once.js through the Node client (clients/node,
 * docs/clients.md): what is left when the plumbing (the LISTEN connection,
 * set_tenant in each transaction, reading on each hint) is the library's.
 *
 * Environment as run_once.js's: PGHOST/PGPORT/PGDATABASE/PGUSER (a login
 * granted agent_backend), SANDBOX_ORG, SANDBOX_WORKSPACE, SANDBOX_MODEL.
 * Exits 0 when every step did what it should.
 */
let lib;
try {
	lib = require('sandbox-ext-client');
} catch {		// run from the repository, not installed (npm install ./clients/node)
	lib = require('../../clients/node');
}
const { Client } = lib;

const CODE = `const fs = require('fs');
const rows = fs.readFileSync('sales.csv', 'utf8').trim().split('\\n').slice(1).map((l) => l.split(','));
let i = 0;
const next = () => {
  if (i < rows.length) { console.log('region', rows[i][0], rows[i][1]); i++; setTimeout(next, 300); return; }
  const total = rows.reduce((s, r) => s + Number(r[1]), 0);
  fs.writeFileSync('total.txt', String(total));
  console.log('total', total);
};
next();
`;

async function main() {
	let failures = 0;
	const expect = (what, ok) => { console.log(`${ok ? 'ok' : 'not ok'} - ${what}`); if (!ok) failures++; };
	const c = new Client({ org: process.env.SANDBOX_ORG, workspace: process.env.SANDBOX_WORKSPACE });
	try {
		const [agent, conv] = await c.tx(async (q) => {		// setup calls the client does not wrap
			const a = (await q.query("SELECT agent.create_agent('Client example', 'specialist', $1, 'alice@example.com', code_execution_enabled => true, file_upload_enabled => true) AS id",
				[process.env.SANDBOX_MODEL])).rows[0].id;
			const v = (await q.query("SELECT agent.create_conversation($1, 'alice@example.com', 'Sales', code_execution_enabled => true) AS id", [a])).rows[0].id;
			return [a, v];
		});
		await c.upload(conv, 'sales.csv', 'region,amount\nnorth,120\nsouth,80\neast,50\n', 'alice@example.com');
		const run = await c.request({ agent, conversation: conv, language: 'node', code: CODE, requestedBy: 'alice@example.com', description: 'Total sales' });

		// The approver: the card as it arrives, approved for the code it shows.
		for await (const card of c.cards({ timeout: 30000 })) {
			if (card.approvalId !== run.approvalId) continue;
			console.log(`card: ${card.title}; ${card.runtime}; costs ${card.creditsCost} of ${card.orgBalance} credits`);
			await c.approve(card, 'bob@example.com');
			break;
		}

		for await (const chunk of c.chunks(run, { timeout: 120000 })) {
			for (const line of chunk.data.split('\n').filter(Boolean)) console.log(chunk.stream === 'stdout' ? `  | ${line}` : `  | [stderr] ${line}`);
		}
		const result = await c.wait(run, 0);
		expect('the run succeeded', result.succeeded && result.exitCode === 0);
		expect('its output ends with the total', result.stdout.endsWith('total 250\n'));
		const total = result.files.find((f) => f.name === 'total.txt');
		expect('the file it wrote holds the total', total !== undefined && (await c.download(String(total.file_id))).content.toString() === '250');
	} finally {
		await c.close();
	}
	console.log(`node client example: ${failures === 0 ? 'done' : `${failures} failed`}`);
	process.exit(failures ? 1 : 0);
}
main().catch((e) => { console.log(`not ok - the example ran to its end: ${e && e.stack}`); process.exit(1); });
