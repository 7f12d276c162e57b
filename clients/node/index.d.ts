/**
 * A run handle: what request() returns.  status is the request's then
 * (pending_approval; on a replay of an idempotency key, the invocation's
 * state); replayed: an earlier request with the same key was returned.
 */
export type Run = {
    invocationId: string;
    approvalId: string | null;
    status: string;
    replayed: boolean;
};
export type Chunk = {
    seq: number;
    stream: "stdout" | "stderr";
    data: string;
};
/**
 * What wait() returns: state when the wait ended; finished, whether that
 * state is final (false: the timeout passed first and the run goes on);
 * exitCode, the payload's (null when it did not exit); succeeded, state
 * is 'succeeded'.
 */
export type Result = {
    invocationId: string;
    state: string;
    finished: boolean;
    stateReason: string | null;
    exitCode: number | null;
    stdout: string;
    stderr: string;
    outputTruncated: boolean;
    creditsCharged: number;
    toolCallId: string | null;
    outputPreview: string | null;
    files: Array<Record<string, unknown>>;
    succeeded: boolean;
};
export type Card = {
    approvalId: string;
    invocationId: string;
    status: string;
    title: string;
    agentName: string | null;
    conversationId: string | null;
    language: string;
    runtime: string | null;
    riskLevel: string | null;
    description: string | null;
    code: string | null;
    codeSha256: string;
    codeLines: number | null;
    requestedBy: string;
    createdAt: Date;
    expiresAt: Date | null;
    decidedBy: string | null;
    decidedAt: Date | null;
    decisionReason: string | null;
    creditsCost: number | null;
    orgBalance: number | null;
    egressMayReach: string | null;
    egressSha256: string | null;
    image: string | null;
    imageDigest: string | null;
    approvalPolicyId: string | null;
    allowanceId: string | null;
    approvedByPolicy: string | null;
    personNeeded: string | null;
    isolation: string | null;
};
export type FileInfo = {
    id: string;
    name: string;
    origin: string;
    status: string;
    reason: string | null;
    size: number | null;
    sha256: string | null;
    contentType: string | null;
    invocationId: string | null;
    createdAt: Date;
    current: boolean;
};
export type Download = {
    name: string;
    contentType: string | null;
    size: number;
    sha256: string;
    content: Buffer;
};
export type RequestOptions = {
    agent: string;
    conversation?: string | null;
    language: string;
    code: string;
    requestedBy: string;
    description?: string | null;
    idempotencyKey?: string | null;
    wallTimeS?: number | null;
    memoryMb?: number | null;
    image?: string | null;
};
export type ClientOptions = {
    org: string;
    workspace: string;
    connectionString?: string;
    pool?: pg.PoolConfig;
    poll?: number;
};
/** The API for one tenant (org, workspace), as agent_backend. */
export class Client {
    /** @param {ClientOptions} opts */
    constructor(opts: ClientOptions);
    org: string;
    workspace: string;
    poll: number;
    /** @type {pg.ClientConfig} */
    config: pg.ClientConfig;
    pool: pg.Pool;
    /** @type {Promise<Listener> | null} */
    listener: Promise<Listener> | null;
    close(): Promise<void>;
    /**
     * One transaction for the tenant; a database error becomes a SandboxError.
     * @template T
     * @param {(c: pg.PoolClient) => Promise<T>} fn
     * @returns {Promise<T>}
     */
    tx<T>(fn: (c: pg.PoolClient) => Promise<T>): Promise<T>;
    /** @param {string} sql @param {unknown[]} params @returns {Promise<any>} */
    one(sql: string, params: unknown[]): Promise<any>;
    /** @returns {Promise<Listener>} */
    listen(): Promise<Listener>;
    /**
     * agent.request_execution(): a run handle, pending approval.  A refusal of
     * policy rejects with Refused (its SQLSTATE and reason), after the commit
     * that keeps its audit event.
     * @param {RequestOptions} o
     * @returns {Promise<Run>}
     */
    request(o: RequestOptions): Promise<Run>;
    /**
     * agent.approve(); given a Card, binds the approval to the hash of the
     * code that card showed.  Resolves to the invocation id.
     * @param {Card | string} card @param {string} approver @param {string | null} [codeSha256]
     * @returns {Promise<string>}
     */
    approve(card: Card | string, approver: string, codeSha256?: string | null): Promise<string>;
    /** agent.deny(); resolves to the invocation id. @param {Card | string} card @param {string} approver @param {string | null} [reason] @returns {Promise<string>} */
    deny(card: Card | string, approver: string, reason?: string | null): Promise<string>;
    /** agent.cancel(): 'cancelled' (not started) or 'cancelling'. @param {Run | string} run @param {string} actor @param {string | null} [reason] @returns {Promise<string>} */
    cancel(run: Run | string, actor: string, reason?: string | null): Promise<string>;
    /** The workspace's pending cards, oldest first (the inbox). @returns {Promise<Card[]>} */
    pending(): Promise<Card[]>;
    /** One card, whatever its status. @param {Card | string} card @returns {Promise<Card>} */
    card(card: Card | string): Promise<Card>;
    /**
     * Pending cards as a stream, for approvers: those waiting now, then each
     * new one as it arrives, each once.  Ends after `timeout` ms (default:
     * never; break out of the loop, or abort `signal`, to stop).
     * @param {{ timeout?: number, signal?: AbortSignal }} [opts]
     * @returns {AsyncGenerator<Card, void, undefined>}
     */
    cards(opts?: {
        timeout?: number;
        signal?: AbortSignal;
    }): AsyncGenerator<Card, void, undefined>;
    /** The invocation's state now. @param {Run | string} run @returns {Promise<string>} */
    state(run: Run | string): Promise<string>;
    /** Whether a state is final (agent.is_terminal; an unknown state is 22023). @param {string} state @returns {Promise<boolean>} */
    isTerminal(state: string): Promise<boolean>;
    /** The output stored so far after a sequence number. @param {Run | string} run @param {number} [afterSeq] @returns {Promise<Chunk[]>} */
    output(run: Run | string, afterSeq?: number): Promise<Chunk[]>;
    /**
     * The run's output as it is stored, until its state is final.  Rejects
     * with TimeoutError when `timeout` ms pass first (the run goes on).
     * @param {Run | string} run
     * @param {{ timeout?: number, afterSeq?: number, signal?: AbortSignal }} [opts]
     * @returns {AsyncGenerator<Chunk, void, undefined>}
     */
    chunks(run: Run | string, opts?: {
        timeout?: number;
        afterSeq?: number;
        signal?: AbortSignal;
    }): AsyncGenerator<Chunk, void, undefined>;
    /**
     * Call onStdout / onStderr with each piece of output as it is stored,
     * until the run ends; then its Result.
     * @param {Run | string} run
     * @param {((data: string) => void) | null} [onStdout]
     * @param {((data: string) => void) | null} [onStderr]
     * @param {{ timeout?: number }} [opts]
     * @returns {Promise<Result>}
     */
    stream(run: Run | string, onStdout?: ((data: string) => void) | null, onStderr?: ((data: string) => void) | null, opts?: {
        timeout?: number;
    }): Promise<Result>;
    /**
     * agent.wait_result(): wait up to `timeoutSeconds` for the end, then the
     * state, the whole output and the tool call in one call.
     * result.finished is false when the timeout passed first.
     * @param {Run | string} run @param {number} [timeoutSeconds]
     * @returns {Promise<Result>}
     */
    wait(run: Run | string, timeoutSeconds?: number): Promise<Result>;
    /**
     * agent.upload_file(): the new file's id (in /workspace/<name> at the next run).
     * @param {string} conversation @param {string} name @param {Buffer | string} content
     * @param {string} uploadedBy @param {string | null} [contentType]
     * @returns {Promise<string>}
     */
    upload(conversation: string, name: string, content: Buffer | string, uploadedBy: string, contentType?: string | null): Promise<string>;
    /** agent.list_files(). @param {string} conversation @returns {Promise<FileInfo[]>} */
    files(conversation: string): Promise<FileInfo[]>;
    /** agent.download_file(). @param {FileInfo | string} file @returns {Promise<Download>} */
    download(file: FileInfo | string): Promise<Download>;
    /** agent.delete_file(): the bytes freed. @param {string} conversation @param {string} name @param {string} deletedBy @returns {Promise<number>} */
    deleteFile(conversation: string, name: string, deletedBy: string): Promise<number>;
}
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
export class SandboxError extends Error {
    /** @param {any} e */
    static from(e: any): SandboxError;
    /**
     * @param {string | null} sqlstate
     * @param {string} message
     * @param {string | null} [detail]
     * @param {string | null} [hint]
     */
    constructor(sqlstate: string | null, message: string, detail?: string | null, hint?: string | null);
    sqlstate: string | null;
    detail: string | null;
    hint: string | null;
}
/**
 * A request the policy refused (request_execution's status 'denied'):
 * sqlstate is the refusal's, reason its code; it was audited and committed.
 */
export class Refused extends SandboxError {
    /** @param {string | null} sqlstate @param {string} reason */
    constructor(sqlstate: string | null, reason: string);
    reason: string;
}
/** A wait that ran out of time (the run goes on). */
export class TimeoutError extends Error {
    /** @param {string} message */
    constructor(message: string);
}
import pg = require("pg");
/** The LISTEN connection: which channels were notified, and who waits for which. */
declare class Listener {
    /** @param {pg.Client} conn */
    constructor(conn: pg.Client);
    conn: pg.Client;
    /** @type {Set<string>} */
    notified: Set<string>;
    /** @type {Map<string, number>} */
    listening: Map<string, number>;
    /** @type {Map<string, Set<() => void>>} */
    waiters: Map<string, Set<() => void>>;
    /** @param {string} channel */
    listen(channel: string): Promise<void>;
    /** @param {string} channel */
    unlisten(channel: string): Promise<void>;
    /** Until `channel` is notified or `ms` pass (a hint either way). @param {string} channel @param {number} ms */
    wait(channel: string, ms: number): Promise<any>;
}
export {};
