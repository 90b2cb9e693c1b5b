// End-to-end: a renter's billing dashboard at /billing. The data is made
// through the public GraphQL API from node, as any client could: a host
// lists a machine and runs its agent (simulated GPUs), a renter signs up,
// the demo operator (seeded by `gpumarket dev`) grants it credit, and the
// renter rents the machine. Then, in Chromium, the renter logs in at
// /billing and sees its balance and the running instance's cost growing;
// once the instance is stopped through the API, the page shows it stopped.
// Needs GPUMARKET_WEB_E2E_URL and GPUMARKET_E2E_AGENT_BIN (web/e2e/run.sh).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, openSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const BASE = process.env.GPUMARKET_WEB_E2E_URL;
if (!BASE) throw new Error('GPUMARKET_WEB_E2E_URL is not set: the gateway of a running stack (web/e2e/run.sh)');
const SHOTS = join(dirname(fileURLToPath(import.meta.url)), 'screenshots');
const TIMEOUT = 15_000;
const AGENT_BIN = process.env.GPUMARKET_E2E_AGENT_BIN;
const AGENT_VHOST = process.env.GPUMARKET_E2E_VHOST ?? '/';
const AGENT_LOG = process.env.GPUMARKET_E2E_AGENT_LOG;
const OPERATOR = { email: 'operator@demo.gpumarket.dev', password: 'demo-password-1' };
const PASSWORD = 'correct horse battery';

/** @type {import('node:child_process').ChildProcess | undefined} */
let agent;
/** @type {import('playwright-core').Browser} */
let browser;

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
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
});

after(async () => {
  agent?.kill('SIGTERM');
  await browser?.close();
});

/**
 * One GraphQL request to the public API; throws on any error.
 * @param {string} query @param {Record<string, unknown>} variables @param {string} [token]
 * @returns {Promise<any>}
 */
async function gql(query, variables = {}, token) {
  /** @type {Record<string, string>} */
  const headers = { 'content-type': 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  const res = await fetch(`${BASE}/graphql`, { method: 'POST', headers, body: JSON.stringify({ query, variables }) });
  const body = await res.json();
  if (body.errors?.length) throw new Error(`${query.trim().split('\n')[0]}: ${JSON.stringify(body.errors)}`);
  return body.data;
}

/**
 * Polls `check` until it returns a truthy value.
 * @template T @param {() => Promise<T>} check @param {string} what @param {number} [ms]
 * @returns {Promise<NonNullable<T>>}
 */
async function until(check, what, ms = 30_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return /** @type {NonNullable<T>} */ (v);
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

/** @param {import('playwright-core').Page} page @param {string} name */
async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

/** @param {string} role @param {string} tag */
async function signUp(role, tag) {
  const email = `${tag}-${Date.now()}@e2e.example`;
  const data = await gql(
    'mutation($input: SignUpInput!) { signUp(input: $input) { token me { tenantId } } }',
    { input: { email, password: PASSWORD, tenantName: `E2E ${tag}`, roles: [role] } },
  );
  return { email, token: /** @type {string} */ (data.signUp.token), tenantId: /** @type {string} */ (data.signUp.me.tenantId) };
}

/** The cost shown for the instance's row, as a number (display only). @param {import('playwright-core').Locator} row */
async function shownCost(row) {
  const text = await row.getByTestId('billing-cost').locator('strong').innerText();
  const m = /(-?\d+\.\d+)/.exec(text.replace(/,/g, ''));
  assert.ok(m, `a cost: ${text}`);
  return Number(m[1]);
}

test('a renter sees its balance, a running instance whose cost grows, and the instance stopped', { skip: !AGENT_BIN && 'GPUMARKET_E2E_AGENT_BIN is not set' }, async () => {
  const t0 = Date.now();
  // A host lists a machine and runs its agent with simulated GPUs.
  const host = await signUp('HOST', 'billing-host');
  const models = (await gql('{ gpuModels { name vramGib } }')).gpuModels;
  const model = models[models.length - 1];
  const reg = (
    await gql(
      `mutation($input: RegisterMachineInput!) {
        registerMachine(input: $input) { machine { id } agentToken } }`,
      {
        input: {
          name: 'billing-rig',
          gpuModel: model.name,
          gpuCount: 2,
          cpuCores: 16,
          ramGib: 64,
          diskGib: 200,
          country: 'DE',
          idempotencyKey: `billing-${Date.now()}`,
        },
      },
      host.token,
    )
  ).registerMachine;
  const machineId = reg.machine.id;
  await gql(
    'mutation($id: ID!) { setMachinePricing(machineId: $id, pricePerGpuHour: "1.80", storagePricePerGbMonth: "5.00") { id } }',
    { id: machineId },
    host.token,
  );
  await gql('mutation($id: ID!) { listMachine(machineId: $id) { id } }', { id: machineId }, host.token);
  const out = AGENT_LOG ? openSync(AGENT_LOG, 'a') : 'ignore';
  agent = spawn(
    /** @type {string} */ (AGENT_BIN),
    [
      'agent', '--machine-id', machineId, '--token', reg.agentToken, '--vhost', AGENT_VHOST,
      '--simulate-gpus', '2', '--simulate-model', model.name, '--simulate-vram-gib', String(model.vramGib),
    ],
    { stdio: ['ignore', out, out] },
  );

  // A renter with credit from the demo operator.
  const renter = await signUp('RENTER', 'billing-renter');
  const op = (
    await gql('mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }', {
      e: OPERATOR.email,
      p: OPERATOR.password,
    })
  ).login.token;
  await gql(
    'mutation($t: ID!, $k: String!) { grantCredit(tenantId: $t, amount: "1.00", idempotencyKey: $k, reason: "e2e") { amount } }',
    { t: renter.tenantId, k: `billing-credit-${Date.now()}` },
    op,
  );

  // The renter rents one GPU of the machine once it is online and offered.
  const offer = await until(async () => {
    const nodes = (await gql('{ offers(first: 100) { nodes { id machineId gpusFree } } }', {}, renter.token)).offers.nodes;
    return nodes.find((/** @type {any} */ o) => o.machineId === machineId && o.gpusFree > 0);
  }, 'the machine offered');
  const ordered = (
    await gql(
      'mutation($input: CreateOrderInput!) { createOrder(input: $input) { id status } }',
      { input: { offerId: offer.id, gpuCount: 1, idempotencyKey: `billing-order-${Date.now()}` } },
      renter.token,
    )
  ).createOrder;
  await until(
    async () => (await gql('query($id: ID!) { instance(id: $id) { status } }', { id: ordered.id }, renter.token)).instance.status === 'running',
    'the instance running',
  );
  console.log(`# data ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  // In the browser: log in at /billing.
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 }, acceptDownloads: true });
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

  await page.goto(`${BASE}/billing`);
  await page.getByRole('heading', { name: 'Log in to see your billing' }).waitFor();
  await page.getByLabel('Email').fill(renter.email);
  await page.getByLabel('Password').fill('wrong password');
  await page.getByRole('button', { name: 'Log in' }).click();
  assert.match(await page.getByRole('alert').innerText(), /UNAUTHENTICATED/);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();

  // The balance: the credit less what the rental has burnt so far.
  const balance = page.getByTestId('billing-balance');
  await balance.waitFor();
  assert.ok(await page.evaluate(() => sessionStorage.getItem('gpumarket.token')), 'the JWT is in sessionStorage');
  assert.match(await balance.innerText(), /^\$[01]\.\d{2}$/);
  await page.getByText(/1 running instance$/).waitFor();
  // $1 at about $1.94/h lasts about 31 min, below the API's warning threshold.
  assert.match(await page.getByTestId('billing-runway').innerText(), /^\d+ min( \d+ s)?$/);
  await page.getByRole('alert').filter({ hasText: /Low balance/ }).waitFor();

  // The running instance, its cost growing to the second.
  const row = page.locator(`tr[data-instance-id="${ordered.id}"]`);
  await row.getByText('running', { exact: true }).waitFor();
  await page.waitForFunction(
    (id) => {
      const t = document.querySelector(`tr[data-instance-id="${id}"] [data-testid="billing-cost"] strong`)?.textContent ?? '';
      return Number(/[\d.]+/.exec(t)?.[0] ?? 0) > 0;
    },
    ordered.id,
  );
  const first = await shownCost(row);
  await page.waitForTimeout(2100);
  const second = await shownCost(row);
  assert.ok(second > first, `the cost grows: ${first} then ${second}`);
  assert.match(await row.getByTestId('billing-gpu-cost').innerText(), /\d/);
  await page.getByRole('heading', { name: /Spend per day/ }).waitFor();
  await page.getByRole('heading', { name: 'Invoices' }).waitFor();
  await page.getByText('No invoices yet').waitFor();
  await shot(page, 'billing-01-running');

  // Stopped through the API: the page shows it stopped, with its cost fixed.
  await gql('mutation($id: ID!) { stopInstance(id: $id) { id status } }', { id: ordered.id }, renter.token);
  await row.getByText('stopped', { exact: true }).waitFor();
  // Storage is billed while stopped: the burn is the disk's alone.
  await page.getByText(/^0 running instances$/).waitFor();
  await shot(page, 'billing-02-stopped');

  // Once the usage is settled, the operator invoices it (period ending now):
  // the chart has a bar for today, and the invoice opens on its lines.
  await until(
    async () =>
      (await gql('query($f: String!, $t: String!) { usageSeries(bucket: DAY, groupBy: GPU_MODEL, from: $f, to: $t) { points { key } } }', {
        f: new Date(Date.now() - 86_400_000).toISOString(),
        t: new Date(Date.now() + 86_400_000).toISOString(),
      }, renter.token)).usageSeries.points.some((/** @type {any} */ p) => p.key === model.name),
    'the usage settled',
  );
  const run = (
    await gql(
      'mutation($e: String, $t: ID) { runInvoices(periodEnd: $e, tenantId: $t) { invoices { number lines { meter } } } }',
      { e: new Date().toISOString(), t: renter.tenantId },
      op,
    )
  ).runInvoices;
  assert.equal(run.invoices.length, 1, JSON.stringify(run));
  await page.reload();
  const chart = page.getByRole('img', { name: /Spend per day over the last 14 days/ });
  await chart.waitFor();
  assert.ok((await chart.getAttribute('aria-label'))?.includes(model.name), 'the chart names the GPU model');
  await page.getByText('Spend per day as a table').click();
  await page.getByRole('table').filter({ hasText: 'Day (UTC)' }).getByRole('rowheader', { name: new Date().toISOString().slice(0, 10) }).waitFor();
  const invoice = page.getByRole('button', { name: /Invoice #1/ });
  await invoice.click();
  assert.equal(await invoice.getAttribute('aria-expanded'), 'true');
  const lines = page.locator(`#${await invoice.getAttribute('aria-controls')} tbody tr`);
  await lines.first().waitFor();
  assert.equal(await lines.count(), run.invoices[0].lines.length);
  await lines.filter({ hasText: 'gpu' }).first().waitFor();
  await shot(page, 'billing-03-invoice');

  // The usage export: the invoice's FOCUS CSV, one row per line.
  const [download] = await Promise.all([
    page.waitForEvent('download'),
    page.getByRole('button', { name: 'Download usage CSV (FOCUS) for invoice #1' }).click(),
  ]);
  assert.equal(download.suggestedFilename(), 'invoice-1-usage.csv');
  const path = await download.path();
  const csv = readFileSync(path, 'utf8').trim().split('\r\n');
  assert.match(csv[0], /BilledCost/);
  assert.equal(csv.length - 1, run.invoices[0].lines.length, 'one CSV row per invoice line');

  const other = requests.filter((p) => !p.startsWith('/portal') && !p.startsWith('/billing') && p !== '/graphql');
  assert.deepEqual(other, [], 'requests outside the public API');
  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
  console.log(`# billing test in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
