#!/usr/bin/env node
'use strict';
/*
 * The approver's page: one workspace's pending approval cards, live, and
 * the decision on each, taken as the person the platform's proxy says is
 * logged in; after an approval, the run's output live and its tool call.
 * Built on the node client (../index.js): it calls the SQL API as
 * agent_backend for one tenant, like any backend.
 *
 * Who is logged in is not this server's business: the platform's proxy
 * authenticates the person and sets a header (APPROVER_HEADER, default
 * X-Forwarded-User) with the name agent.approve() records.  A request
 * without it is refused (401).  So this server must be reachable only
 * through that proxy (it listens on 127.0.0.1 by default), and the proxy
 * must drop the header from what clients send (docs/clients.md, "The
 * approver's page").  The database still decides: four-eyes
 * (require_distinct_approver), the card's hash, expiry.
 *
 * A decision is a POST of JSON (a cross-site form cannot send one without
 * a CORS preflight, which this server never answers) whose Origin, when
 * sent, must be this server's own.  Everything a card holds reaches the
 * page as data and is rendered with textContent, never as HTML.
 *
 * Environment: SANDBOX_ORG, SANDBOX_WORKSPACE (the tenant), DATABASE_URL or
 * PGHOST/PGPORT/PGDATABASE/PGUSER (a login granted agent_backend),
 * APPROVER_HEADER, PUBLIC_ORIGIN (the page's origin as browsers see it;
 * unset: the request's Host), HOST (127.0.0.1), PORT (8080; 0: any free port, which it
 * prints), POLL_MS (5000).
 */
const http = require('http');
const fs = require('fs');
const path = require('path');
const { Client, SandboxError } = require('..');

const ORG = process.env.SANDBOX_ORG ?? '';
const WORKSPACE = process.env.SANDBOX_WORKSPACE ?? '';
const HEADER = (process.env.APPROVER_HEADER || 'X-Forwarded-User').toLowerCase();
const HOST = process.env.HOST || '127.0.0.1';
const PORT = Number(process.env.PORT || 8080);
const POLL = Number(process.env.POLL_MS || 5000);
// The page's origin as the browser sees it (the proxy's), e.g.
// https://approvals.example.com; unset: this request's Host (or the
// proxy's X-Forwarded-Host) with http or https.
const ORIGINS = (process.env.PUBLIC_ORIGIN ?? '').split(',').map((o) => o.trim().replace(/\/+$/, '')).filter(Boolean);
const PAGE = fs.readFileSync(path.join(__dirname, 'page.html'));

if (!ORG || !WORKSPACE) {
	console.error('sandbox-approver: set SANDBOX_ORG and SANDBOX_WORKSPACE');
	process.exit(2);
}
const client = new Client({
	org: ORG, workspace: WORKSPACE, poll: POLL,
	...(process.env.DATABASE_URL ? { connectionString: process.env.DATABASE_URL } : {}),
});

/** @typedef {import('..').Card} Card */
/** @typedef {http.ServerResponse} Res */

/** The cards pending now (approval id → card), and the pages listening. */
/** @type {Map<string, Card>} */
const pending = new Map();
/** @type {Set<Res>} */
const listeners = new Set();

/** @param {Res} res @param {string} event @param {unknown} data */
function send(res, event, data) {
	res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
}
/** @param {string} event @param {unknown} data */
function broadcast(event, data) {
	for (const res of listeners) send(res, event, data);
}

/** @param {Card} c */
function cardView(c) {
	return {
		approvalId: c.approvalId, invocationId: c.invocationId, title: c.title, agentName: c.agentName,
		language: c.language, runtime: c.runtime, riskLevel: c.riskLevel, description: c.description,
		code: c.code, codeSha256: c.codeSha256, codeLines: c.codeLines, requestedBy: c.requestedBy,
		createdAt: c.createdAt, expiresAt: c.expiresAt, creditsCost: c.creditsCost, orgBalance: c.orgBalance,
		egressMayReach: c.egressMayReach, image: c.image, isolation: c.isolation, personNeeded: c.personNeeded,
	};
}

/*
 * New cards arrive through the client's stream (a notification is a hint;
 * it reads the inbox); the inbox is read again every POLL ms so that cards
 * decided elsewhere, expired or cancelled leave the page, and the balance
 * on each stays current.
 */
async function watchCards() {
	for (;;) {
		try {
			for await (const c of client.cards()) {
				pending.set(c.approvalId, c);
				broadcast('card', cardView(c));
			}
		} catch (e) {
			console.error('sandbox-approver: cards:', SandboxError.from(e).message);
			await new Promise((r) => setTimeout(r, 1000));
		}
	}
}
async function refreshPending() {
	try {
		const now = await client.pending();
		const ids = new Set(now.map((c) => c.approvalId));
		for (const id of [...pending.keys()]) if (!ids.has(id)) pending.delete(id);
		for (const c of now) {
			if (!pending.has(c.approvalId)) broadcast('card', cardView(c));
			pending.set(c.approvalId, c);
		}
		broadcast('pending', { ids: [...ids], balance: now[0]?.orgBalance ?? null });
	} catch (e) {
		console.error('sandbox-approver: inbox:', SandboxError.from(e).message);
	}
	setTimeout(refreshPending, POLL).unref();
}

/** @param {http.IncomingMessage} req @returns {string | null} */
function approverOf(req) {
	const v = req.headers[HEADER];
	const name = Array.isArray(v) ? v[0] : v;
	return name && name.trim() ? name.trim() : null;
}

/** @param {Res} res @param {number} status @param {unknown} body */
function json(res, status, body) {
	res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
	res.end(JSON.stringify(body));
}

/** @param {http.IncomingMessage} req @returns {Promise<any>} */
function readJson(req) {
	return new Promise((resolve, reject) => {
		let body = '';
		req.setEncoding('utf8');
		req.on('data', (d) => {
			body += d;
			if (body.length > 65536) reject(new Error('request body too large'));
		});
		req.on('end', () => {
			try { resolve(JSON.parse(body || '{}')); } catch (e) { reject(e); }
		});
		req.on('error', reject);
	});
}

/**
 * A decision's Origin, when the browser sends one, must be the page's own.
 * @param {http.IncomingMessage} req
 */
function sameOrigin(req) {
	const origin = req.headers.origin;
	if (origin === undefined) return true;
	if (ORIGINS.length) return ORIGINS.includes(origin);
	const hosts = [req.headers.host, req.headers['x-forwarded-host']].flat().filter(Boolean);
	return hosts.some((h) => origin === `http://${h}` || origin === `https://${h}`);
}

/** @param {Res} res */
function openStream(res) {
	res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
	res.write(': sandbox-approver\n\n');
}

/** A run's output, live, then its result and tool call. @param {string} inv @param {http.IncomingMessage} req @param {Res} res */
async function streamRun(inv, req, res) {
	openStream(res);
	const ac = new AbortController();
	req.on('close', () => ac.abort());
	try {
		for await (const c of client.chunks(inv, { signal: ac.signal })) send(res, 'chunk', c);
		if (!ac.signal.aborted) {
			const r = await client.wait(inv, 0);
			send(res, 'result', {
				state: r.state, exitCode: r.exitCode, stateReason: r.stateReason, creditsCharged: r.creditsCharged,
				toolCallId: r.toolCallId, outputPreview: r.outputPreview, files: r.files,
			});
		}
	} catch (e) {
		const err = SandboxError.from(e);
		send(res, 'failure', { sqlstate: err.sqlstate, message: err.message });
	}
	res.end();
}

/** @param {http.IncomingMessage} req @param {Res} res */
async function handle(req, res) {
	const url = new URL(req.url ?? '/', 'http://localhost');
	const approver = approverOf(req);
	if (!approver) {
		json(res, 401, { message: `no approver: the proxy must set ${HEADER}` });
		return;
	}
	if (req.method === 'GET' && url.pathname === '/') {
		res.writeHead(200, {
			'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store',
			'content-security-policy': "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
			'x-frame-options': 'DENY',
		});
		res.end(PAGE);
		return;
	}
	if (req.method === 'GET' && url.pathname === '/api/me') {
		json(res, 200, { approver, workspace: WORKSPACE });
		return;
	}
	if (req.method === 'GET' && url.pathname === '/api/cards') {
		openStream(res);
		send(res, 'hello', { approver });
		for (const c of pending.values()) send(res, 'card', cardView(c));
		listeners.add(res);
		req.on('close', () => listeners.delete(res));
		return;
	}
	const run = url.pathname.match(/^\/api\/runs\/([0-9a-f-]{36})$/);
	if (req.method === 'GET' && run) {
		await streamRun(run[1], req, res);
		return;
	}
	if (req.method === 'POST' && (url.pathname === '/api/approve' || url.pathname === '/api/deny')) {
		if (!String(req.headers['content-type'] ?? '').startsWith('application/json') || !sameOrigin(req)) {
			json(res, 403, { message: 'a decision is a same-origin JSON POST' });
			return;
		}
		try {
			const body = await readJson(req);
			const id = String(body.approvalId ?? '');
			const inv = url.pathname === '/api/approve'
				? await client.approve(id, approver, typeof body.codeSha256 === 'string' ? body.codeSha256 : null)
				: await client.deny(id, approver, typeof body.reason === 'string' && body.reason ? body.reason : null);
			pending.delete(id);
			broadcast('decided', { approvalId: id, invocationId: inv, by: approver, approved: url.pathname === '/api/approve' });
			json(res, 200, { invocationId: inv });
		} catch (e) {
			const err = SandboxError.from(e);
			json(res, err.sqlstate ? 409 : 400, { sqlstate: err.sqlstate, message: err.message, detail: err.detail, hint: err.hint });
		}
		return;
	}
	json(res, 404, { message: 'not found' });
}

const server = http.createServer((req, res) => {
	handle(req, res).catch((e) => {
		console.error('sandbox-approver:', e);
		if (!res.headersSent) json(res, 500, { message: 'internal error' });
		else res.end();
	});
});
server.listen(PORT, HOST, () => {
	const addr = /** @type {import('net').AddressInfo} */ (server.address());
	console.log(`sandbox-approver: http://${HOST}:${addr.port}/ for workspace ${WORKSPACE} (identity header ${HEADER})`);
	watchCards();
	refreshPending();
});
for (const sig of /** @type {const} */ (['SIGINT', 'SIGTERM'])) {
	process.on(sig, () => {
		server.close();
		for (const res of listeners) res.end();
		client.close().finally(() => process.exit(0));
	});
}
