// Compiled by `npm run typecheck` (never run): index.d.ts serves a
// TypeScript user's code, and what it declares matches index.js.
import { Client, SandboxError, Refused, TimeoutError, Run, Result, Card, Chunk } from './index';

async function use(c: Client): Promise<number> {
	const run: Run = await c.request({ agent: 'a', conversation: null, language: 'python', code: 'print(1)', requestedBy: 'alice' });
	for await (const card of c.cards({ timeout: 1000 })) {
		const ok: boolean = card.codeSha256.length === 64 && typeof card.orgBalance === 'number';
		if (ok) await c.approve(card, 'bob');
	}
	for await (const ch of c.chunks(run, { timeout: 1000 })) {
		const s: 'stdout' | 'stderr' = ch.stream;
		void s;
	}
	const r: Result = await c.stream(run, (d: string) => void d, null);
	try {
		await c.wait(run, 1);
	} catch (e) {
		if (e instanceof Refused) return e.reason.length;
		if (e instanceof SandboxError) return (e.sqlstate ?? '').length;
		if (e instanceof TimeoutError) return 0;
	}
	const chunk: Chunk | undefined = (await c.output(run))[0];
	const card: Card = await c.card(run.approvalId ?? '');
	return (r.exitCode ?? 0) + (chunk?.seq ?? 0) + (card.creditsCost ?? 0);
}
void use;
