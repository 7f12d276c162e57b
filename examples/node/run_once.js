// One code execution through sandbox_ext, as a backend service writes it
// (node-postgres).  The same flow as examples/python/run_once.py: a
// requester makes an agent and a thread, uploads a CSV and asks to run
// Python on it; an approver learns of the card on the workspace's approvals
// channel, reads it from the inbox and approves the exact code it saw; the
// requester streams the output from the invocation's channel, then takes the
// result and the tool call in one call and downloads the file the run wrote.
//
// Notifications are hints: whoever learns a channel's name can NOTIFY on
// it, so the client reads the state and the output through the API.
//
// node-postgres runs each query on its own (autocommit) unless it is inside
// BEGIN ... COMMIT: set_tenant() lasts to the end of the transaction, so
// every unit of work below is a transaction that starts with it (inTenant).
//
// Environment: PGHOST/PGPORT/PGDATABASE/PGUSER (a login granted
// agent_backend), SANDBOX_ORG, SANDBOX_WORKSPACE (the tenant), SANDBOX_MODEL.
'use strict';
const { Client } = require('pg');

const ORG = process.env.SANDBOX_ORG;
const WS = process.env.SANDBOX_WORKSPACE;
const MODEL = process.env.SANDBOX_MODEL;

const CODE = [
  'import csv, time',
  'rows = list(csv.DictReader(open("sales.csv")))',
  'for r in rows:',
  '    print("region", r["region"], r["amount"], flush=True)',
  '    time.sleep(0.3)',
  'total = sum(int(r["amount"]) for r in rows)',
  'open("total.txt", "w").write(str(total))',
  'print("total", total)',
  '',
].join('\n');

let failures = 0;
function expect(what, ok, got) {
  console.log((ok ? 'ok - ' : 'not ok - ') + what + (ok || got === undefined ? '' : ': got ' + JSON.stringify(got)));
  if (!ok) failures++;
}

// One transaction in the tenant: BEGIN, set_tenant, fn(client), COMMIT.
async function inTenant(client, fn) {
  await client.query('BEGIN');
  try {
    await client.query('SELECT agent.set_tenant($1, $2)', [ORG, WS]);
    const r = await fn(client);
    await client.query('COMMIT');
    return r;
  } catch (e) {
    await client.query('ROLLBACK');
    throw e;
  }
}

// A connection that LISTENs; notifications are collected, next() waits.
class Listener {
  constructor() {
    this.client = new Client();
    this.got = [];
    this.waiters = [];
    this.client.on('notification', (n) => {
      this.got.push([n.channel, n.payload]);
      this.waiters.splice(0).forEach((w) => w());
    });
  }
  async connect() { await this.client.connect(); }
  async listen(channel) { await this.client.query('LISTEN ' + this.client.escapeIdentifier(channel)); }
  // The notifications received within `ms` (at least one, or none).
  wait(ms) {
    return new Promise((resolve) => {
      const done = () => { clearTimeout(t); const g = this.got; this.got = []; resolve(g); };
      const t = setTimeout(done, ms);
      if (this.got.length) done(); else this.waiters.push(done);
    });
  }
}

async function main() {
  const requester = new Client();
  const approver = new Client();
  const listener = new Listener();
  await Promise.all([requester.connect(), approver.connect(), listener.connect()]);
  try {
    const { agent, conv, approvals } = await inTenant(requester, async (c) => {
      const agent = (await c.query(
        "SELECT agent.create_agent($1, 'specialist', $2, $3, code_execution_enabled => true, file_upload_enabled => true) AS id",
        ['Node example', MODEL, 'alice@example.com'])).rows[0].id;
      const conv = (await c.query(
        "SELECT agent.create_conversation($1, $2, 'Sales by region', code_execution_enabled => true) AS id",
        [agent, 'alice@example.com'])).rows[0].id;
      const approvals = (await c.query('SELECT agent.approvals_channel() AS ch')).rows[0].ch;
      return { agent, conv, approvals };
    });
    await listener.listen(approvals);

    const req = await inTenant(requester, async (c) => {
      await c.query("SELECT agent.upload_file($1, 'sales.csv', $2, $3, 'text/csv')",
        [conv, Buffer.from('region,amount\nnorth,120\nsouth,80\neast,50\n'), 'alice@example.com']);
      const r = (await c.query(
        "SELECT invocation_id, approval_id, status, reason FROM agent.request_execution($1, $2, $3, 'python', $4, $5, $6)",
        [WS, agent, conv, CODE, 'alice@example.com', 'Total sales'])).rows[0];
      r.output = (await c.query('SELECT agent.output_channel($1) AS ch', [r.invocation_id])).rows[0].ch;
      return r;
    });
    expect('the request waits for approval', req.status === 'pending_approval', req);
    await listener.listen(req.output);   // before the approval: no notification is missed

    // The approver: the card's notification, the inbox, the decision.
    const notes = await listener.wait(30000);
    expect('the approvals channel announced the card',
      notes.some(([ch, p]) => ch === approvals && p === req.approval_id), notes);
    await inTenant(approver, async (c) => {
      const card = (await c.query(
        'SELECT title, runtime, credits_cost, org_balance, code, code_sha256 FROM agent.pending_approvals() WHERE approval_id = $1',
        [req.approval_id])).rows[0];
      expect('the card is in the inbox', card !== undefined);
      console.log(`card: ${card.title}; ${card.runtime}; costs ${card.credits_cost} of ${card.org_balance} credits`);
      expect('the card shows the code', card.code === CODE);
      expect("the card shows the interpreter's version", card.runtime.startsWith('python3 3.'), card.runtime);
      // Approve the hash of the code that was shown: nothing else can run.
      await c.query('SELECT agent.approve($1, $2, $3)', [req.approval_id, 'bob@example.com', card.code_sha256]);
    });

    // The requester streams the output: each notification is a reason to read.
    let seq = 0;
    const chunks = [];
    const deadline = Date.now() + 120000;
    for (;;) {
      await listener.wait(5000);
      const state = await inTenant(requester, async (c) => {
        const out = await c.query('SELECT * FROM agent.read_output($1, $2)', [req.invocation_id, seq]);
        for (const row of out.rows) {
          seq = row.seq;
          chunks.push(row.data);
          for (const line of row.data.split('\n').filter((l) => l !== ''))
            console.log(row.stream === 'stdout' ? `  | ${line}` : `  | [stderr] ${line}`);
        }
        return (await c.query('SELECT state FROM agent.invocations WHERE id = $1', [req.invocation_id])).rows[0].state;
      });
      if (!['pending_approval', 'approved', 'provisioning', 'running'].includes(state) || Date.now() > deadline) break;
    }
    expect('the output streamed, in order', chunks.join('').startsWith('region north 120'), chunks.slice(0, 1));

    // One call: the end, the output and the tool call.
    await inTenant(requester, async (c) => {
      const r = (await c.query(
        "SELECT state, finished, exit_code, stdout, tool_call_id, output_preview, files FROM agent.wait_result($1, '60 s')",
        [req.invocation_id])).rows[0];
      expect('the run succeeded', r.state === 'succeeded' && r.finished === true && r.exit_code === 0, r);
      expect('its output is the whole stdout', r.stdout.endsWith('total 250\n'), r.stdout);
      expect('the tool call is there', r.tool_call_id !== null && r.output_preview === r.stdout);
      const produced = r.files.filter((f) => f.name === 'total.txt');
      expect('the tool call lists the file the run wrote', produced.length === 1, r.files);
      const f = (await c.query('SELECT content FROM agent.download_file($1)', [produced[0].file_id])).rows[0];
      expect('the file holds what the run wrote', f.content.toString() === '250', f.content.toString());
    });
  } finally {
    await Promise.all([requester.end(), approver.end(), listener.client.end()]);
  }
  console.log(`node example: ${failures === 0 ? 'done' : failures + ' failed'}`);
  return failures ? 1 : 0;
}

main().then((rc) => process.exit(rc), (e) => { console.error(e); process.exit(2); });
