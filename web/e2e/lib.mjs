// What the e2e tests share: the stack under test (from the environment that
// web/e2e/run.sh sets), the browser, GraphQL requests to the public API, and
// the data made through it (accounts, a listed machine with its agent, credit,
// a rental). Not a test file itself (node --test runs only `*.test.mjs`).
import { spawn } from 'node:child_process';
import { mkdirSync, openSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { axeFindings } from './portal-axe.mjs';

const base = process.env.GPUMARKET_WEB_E2E_URL;
if (!base) throw new Error('GPUMARKET_WEB_E2E_URL is not set: the gateway of a running stack (web/e2e/run.sh)');
/** The gateway of the stack under test. */
export const BASE = base;
export const SHOTS = join(dirname(fileURLToPath(import.meta.url)), 'screenshots');
export const TIMEOUT = 15_000;
// When set (web/e2e/run.sh sets them), the tests run the agent with
// simulated GPUs; the tests that need a machine online skip without it.
export const AGENT_BIN = process.env.GPUMARKET_E2E_AGENT_BIN;
export const AGENT_VHOST = process.env.GPUMARKET_E2E_VHOST ?? '/';
export const AGENT_LOG = process.env.GPUMARKET_E2E_AGENT_LOG;
/** The demo operator that `gpumarket dev` seeds. */
export const OPERATOR = { email: 'operator@demo.gpumarket.dev', password: 'demo-password-1' };
export const PASSWORD = 'correct horse battery';

/** Launches Debian's Chromium (the screenshots directory made first). */
export async function launchBrowser() {
  mkdirSync(SHOTS, { recursive: true });
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    // Playwright adds --headless and a fresh, temporary --user-data-dir.
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}

/**
 * One browser for a test file: launched before its tests, closed after them
 * with the file's agents stopped and, when `axeLabel` is given, the axe
 * findings printed per page state.
 * @param {string | null} axeLabel
 * @returns {() => import('playwright-core').Browser}
 */
export function browserForFile(axeLabel) {
  /** @type {import('playwright-core').Browser | undefined} */
  let browser;
  before(async () => {
    browser = await launchBrowser();
  });
  after(async () => {
    if (axeLabel) console.log(`axe findings (any impact) by ${axeLabel}: ${JSON.stringify(axeFindings, null, 2)}`);
    stopAgents();
    await browser?.close();
  });
  return () => {
    if (!browser) throw new Error('the browser is launched in before()');
    return browser;
  };
}

/** @param {import('playwright-core').Page} page @param {string} name */
export async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

/**
 * A new page with the tests' timeout, collecting console errors (and, with
 * `httpErrors`, responses of status 400 or more) and the paths requested.
 * @param {import('playwright-core').BrowserContext} context
 * @param {{ httpErrors?: boolean }} [opts]
 */
export async function watchedPage(context, { httpErrors = false } = {}) {
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  /** @type {string[]} */
  const consoleErrors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
  });
  /** @type {string[]} */
  const requests = [];
  page.on('request', (r) => requests.push(new URL(r.url()).pathname));
  if (httpErrors) {
    page.on('response', (r) => {
      if (r.status() >= 400) consoleErrors.push(`HTTP ${r.status()} ${r.url()}`);
    });
  }
  return { page, consoleErrors, requests };
}

/**
 * An amount formatted in the page, as the portal formats it (the browser's
 * locale, `digits` decimals when given).
 * @param {import('playwright-core').Page} page @param {string} currency
 * @returns {(n: number, digits?: number) => Promise<string>}
 */
export function pageMoney(page, currency) {
  return (n, digits) =>
    page.evaluate(
      ({ n, c, digits }) =>
        new Intl.NumberFormat(undefined, {
          style: 'currency',
          currency: c,
          ...(digits === undefined ? {} : { minimumFractionDigits: digits, maximumFractionDigits: digits }),
        }).format(n),
      { n, c: currency, digits },
    );
}

/**
 * One GraphQL request to the public API; throws on any error.
 * @param {string} query @param {Record<string, unknown>} variables @param {string} [token]
 * @returns {Promise<any>}
 */
export async function gql(query, variables = {}, token) {
  /** @type {Record<string, string>} */
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await fetch(`${BASE}/graphql`, { method: 'POST', headers, body: JSON.stringify({ query, variables }) });
  const body = await res.json();
  if (body.errors?.length) throw new Error(`${query.trim().split('\n')[0]}: ${JSON.stringify(body.errors)}`);
  return body.data;
}

/**
 * Polls `check` every `every` ms until it returns a truthy value.
 * @template T @param {() => Promise<T>} check @param {string} what @param {number} [ms] @param {number} [every]
 * @returns {Promise<NonNullable<T>>}
 */
export async function until(check, what, ms = 30_000, every = 500) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return /** @type {NonNullable<T>} */ (v);
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, every));
  }
}

/** A new account through the API. @param {string} role @param {string} tag */
export async function signUp(role, tag) {
  const email = `${tag}-${Date.now()}@e2e.example`;
  const data = await gql('mutation($input: SignUpInput!) { signUp(input: $input) { token me { tenantId } } }', {
    input: { email, password: PASSWORD, tenantName: `E2E ${tag}`, roles: [role] },
  });
  return { email, token: /** @type {string} */ (data.signUp.token), tenantId: /** @type {string} */ (data.signUp.me.tenantId) };
}

/** The demo operator's JWT. @returns {Promise<string>} */
export async function operatorToken() {
  return (
    await gql('mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }', {
      e: OPERATOR.email,
      p: OPERATOR.password,
    })
  ).login.token;
}

/**
 * The operator grants a tenant credit.
 * @param {string} op the operator's JWT @param {string} tenantId @param {string} amount @param {string} idempotencyKey
 */
export async function grantCredit(op, tenantId, amount, idempotencyKey) {
  await gql(
    `mutation($t: ID!, $k: String!) { grantCredit(tenantId: $t, amount: "${amount}", idempotencyKey: $k, reason: "e2e") { amount } }`,
    { t: tenantId, k: idempotencyKey },
    op,
  );
}

/**
 * A host registers a machine with 2 GPUs of `model`, prices and lists it.
 * @param {string} hostToken
 * @param {{ name: string, vramGib: number }} model
 * @param {{ name: string, country: string, idempotencyKey: string, pricePerGpuHour: string, storagePricePerGbMonth?: string }} m
 * @returns {Promise<{ machineId: string, agentToken: string }>}
 */
export async function listedMachine(hostToken, model, m) {
  const reg = (
    await gql(
      'mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } agentToken } }',
      {
        input: {
          name: m.name,
          gpuModel: model.name,
          gpuCount: 2,
          cpuCores: 16,
          ramGib: 64,
          diskGib: 200,
          country: m.country,
          idempotencyKey: m.idempotencyKey,
        },
      },
      hostToken,
    )
  ).registerMachine;
  const machineId = reg.machine.id;
  const storage = m.storagePricePerGbMonth === undefined ? '' : `, storagePricePerGbMonth: "${m.storagePricePerGbMonth}"`;
  await gql(
    `mutation($id: ID!) { setMachinePricing(machineId: $id, pricePerGpuHour: "${m.pricePerGpuHour}"${storage}) { id } }`,
    { id: machineId },
    hostToken,
  );
  await gql('mutation($id: ID!) { listMachine(machineId: $id) { id } }', { id: machineId }, hostToken);
  return { machineId, agentToken: reg.agentToken };
}

/** @type {import('node:child_process').ChildProcess[]} */
const agents = [];

/**
 * Runs the agent (`AGENT_BIN`) with `args` (`agent --machine-id … --token …`)
 * on the test vhost, with 2 simulated GPUs of the model; stopped by `stopAgents`.
 * @param {string[]} args @param {string} modelName @param {number | string} vramGib
 */
export function startAgent(args, modelName, vramGib) {
  if (!AGENT_BIN) throw new Error('GPUMARKET_E2E_AGENT_BIN is not set');
  const out = AGENT_LOG ? openSync(AGENT_LOG, 'a') : 'ignore';
  const agent = spawn(
    AGENT_BIN,
    [...args, '--vhost', AGENT_VHOST, '--simulate-gpus', '2', '--simulate-model', modelName, '--simulate-vram-gib', String(vramGib)],
    { stdio: ['ignore', out, out] },
  );
  agents.push(agent);
  return agent;
}

export function stopAgents() {
  for (const agent of agents.splice(0)) agent.kill('SIGTERM');
}

/**
 * A renter rents one GPU of the machine once it is online and offered, and
 * waits for the instance to run.
 * @param {string} renterToken @param {string} machineId @param {string} idempotencyKey @param {number} [every] polling interval (ms)
 * @returns {Promise<{ id: string, state: string }>}
 */
export async function rentOneGpu(renterToken, machineId, idempotencyKey, every = 500) {
  const offer = await until(
    async () => {
      const nodes = (await gql('{ offers(first: 100) { nodes { id machineId gpusFree } } }', {}, renterToken)).offers.nodes;
      return nodes.find((/** @type {any} */ o) => o.machineId === machineId && o.gpusFree > 0);
    },
    'the machine offered',
    30_000,
    every,
  );
  const ordered = (
    await gql(
      'mutation($input: CreateOrderInput!) { createOrder(input: $input) { id state } }',
      { input: { offerId: offer.id, gpuCount: 1, idempotencyKey } },
      renterToken,
    )
  ).createOrder;
  await until(
    async () => (await gql('query($id: ID!) { instance(id: $id) { state } }', { id: ordered.id }, renterToken)).instance.state === 'RUNNING',
    'the instance running',
    30_000,
    every,
  );
  return ordered;
}

/** The start of the UTC hour `hours` whole hours after the current one, as the API's DateTime. @param {number} hours */
export function wholeHoursFromNow(hours) {
  const hour = 3_600_000;
  return new Date(Math.floor(Date.now() / hour) * hour + hours * hour).toISOString();
}

/**
 * A host sets a machine's terms for reserved blocks through the API.
 * @param {string} hostToken @param {string} machineId
 * @param {{ pricePerGpuHour: string, maxLeadDays: number, minBlockHours: number }} terms
 */
export async function setReservedTerms(hostToken, machineId, terms) {
  return (
    await gql(
      'mutation($id: ID!, $terms: ReservedTermsInput) { setReservedTerms(machineId: $id, terms: $terms) { pricePerGpuHour maxLeadDays minBlockHours currency } }',
      { id: machineId, terms },
      hostToken,
    )
  ).setReservedTerms;
}

/**
 * A renter reserves a block of the machine's GPUs through the API, once the
 * machine is offered with its terms, and waits for it to be booked (paid).
 * @param {string} renterToken @param {string} machineId
 * @param {{ gpuCount: number, startsAt: string, endsAt: string, maxPricePerGpuHour?: string, idempotencyKey: string }} block
 * @returns {Promise<{ id: string, state: string, gpuIndices: number[], amount: string, hours: number, currency: string }>}
 */
export async function reserveBlock(renterToken, machineId, block) {
  await until(
    async () => {
      const nodes = (await gql('{ offers(first: 100) { nodes { machineId reserved { pricePerGpuHour } } } }', {}, renterToken)).offers.nodes;
      return nodes.some((/** @type {any} */ o) => o.machineId === machineId && o.reserved);
    },
    'the machine offered with reserved terms',
  );
  const fields = 'id state gpuIndices amount hours currency reason';
  const made = (
    await gql(`mutation($input: ReserveInput!) { reserve(input: $input) { ${fields} } }`, { input: { offerId: machineId, ...block } }, renterToken)
  ).reserve;
  return until(
    async () => {
      const r = (await gql(`query($id: ID!) { reservation(id: $id) { ${fields} } }`, { id: made.id }, renterToken)).reservation;
      if (r.state === 'FAILED') throw new Error(`the reservation failed: ${r.reason}`);
      return r.state === 'BOOKED' ? r : null;
    },
    'the reservation booked',
  );
}
