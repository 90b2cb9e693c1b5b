// End-to-end: a host with earnings sees, in the portal, the earnings
// preview computed from the API's platform fee rate, the per-machine,
// per-day earnings chart with its table, and the totals. The earnings are
// made through the public GraphQL API from node: the host lists a machine
// and runs its agent (simulated GPUs), a renter with credit from the demo
// operator (seeded by `gpumarket dev`) rents it for a few seconds.
// Needs GPUMARKET_WEB_E2E_URL and GPUMARKET_E2E_AGENT_BIN (web/e2e/run.sh).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, openSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { axeFindings, checkA11y } from './portal-axe.mjs';

const BASE = process.env.GPUMARKET_WEB_E2E_URL;
if (!BASE) throw new Error('GPUMARKET_WEB_E2E_URL is not set: the gateway of a running stack (web/e2e/run.sh)');
const HERE = dirname(fileURLToPath(import.meta.url));
const SHOTS = join(HERE, 'screenshots');
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
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
});

after(async () => {
  console.log(`axe findings (any impact) by page state: ${JSON.stringify(axeFindings, null, 2)}`);
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
    await new Promise((r) => setTimeout(r, 300));
  }
}

/** @param {string} role @param {string} tag */
async function signUp(role, tag) {
  const email = `${tag}-${Date.now()}@e2e.example`;
  const data = await gql('mutation($input: SignUpInput!) { signUp(input: $input) { token me { tenantId } } }', {
    input: { email, password: PASSWORD, tenantName: `E2E ${tag}`, roles: [role] },
  });
  return { email, token: /** @type {string} */ (data.signUp.token), tenantId: /** @type {string} */ (data.signUp.me.tenantId) };
}

test('a host with earnings sees the preview from the API fee rate, the earnings chart and its table', { skip: !AGENT_BIN && 'GPUMARKET_E2E_AGENT_BIN is not set' }, async () => {
  const t0 = Date.now();
  const host = await signUp('HOST', 'earnings-host');
  const models = (await gql('{ gpuModels { name vramGib } }')).gpuModels;
  const model = models[0];
  const reg = (
    await gql(
      'mutation($input: RegisterMachineInput!) { registerMachine(input: $input) { machine { id } agentToken } }',
      {
        input: {
          name: 'earning-rig', gpuModel: model.name, gpuCount: 2, cpuCores: 16, ramGib: 64, diskGib: 200,
          country: 'NL', idempotencyKey: `earnings-${Date.now()}`,
        },
      },
      host.token,
    )
  ).registerMachine;
  const machineId = reg.machine.id;
  await gql('mutation($id: ID!) { setMachinePricing(machineId: $id, pricePerGpuHour: "0.80") { id } }', { id: machineId }, host.token);
  await gql('mutation($id: ID!) { listMachine(machineId: $id) { id } }', { id: machineId }, host.token);
  const out = AGENT_LOG ? openSync(AGENT_LOG, 'a') : 'ignore';
  agent = spawn(
    /** @type {string} */ (AGENT_BIN),
    ['agent', '--machine-id', machineId, '--token', reg.agentToken, '--vhost', AGENT_VHOST,
      '--simulate-gpus', '2', '--simulate-model', model.name, '--simulate-vram-gib', String(model.vramGib)],
    { stdio: ['ignore', out, out] },
  );

  // A renter with credit rents one GPU for a moment, then stops.
  const renter = await signUp('RENTER', 'earnings-renter');
  const op = (await gql('mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }', { e: OPERATOR.email, p: OPERATOR.password })).login.token;
  await gql(
    'mutation($t: ID!, $k: String!) { grantCredit(tenantId: $t, amount: "50", idempotencyKey: $k, reason: "e2e") { amount } }',
    { t: renter.tenantId, k: `earnings-credit-${Date.now()}` },
    op,
  );
  const offer = await until(async () => {
    const nodes = (await gql('{ offers(first: 100) { nodes { id machineId gpusFree } } }', {}, renter.token)).offers.nodes;
    return nodes.find((/** @type {any} */ o) => o.machineId === machineId && o.gpusFree > 0);
  }, 'the machine offered');
  const ordered = (
    await gql('mutation($input: CreateOrderInput!) { createOrder(input: $input) { id } }', {
      input: { offerId: offer.id, gpuCount: 1, idempotencyKey: `earnings-order-${Date.now()}` },
    }, renter.token)
  ).createOrder;
  await until(
    async () => (await gql('query($id: ID!) { instance(id: $id) { status } }', { id: ordered.id }, renter.token)).instance.status === 'running',
    'the instance running',
  );
  await new Promise((r) => setTimeout(r, 2000));
  await gql('mutation($id: ID!) { stopInstance(id: $id) { id } }', { id: ordered.id }, renter.token);
  // The usage is posted in parts: wait until the total holds still.
  /** @type {string | null} */
  let seen = null;
  const earnings = await until(async () => {
    const e = (await gql('{ hostEarnings { total currency postings { feeRate postedAt } } }', {}, host.token)).hostEarnings;
    const settled = e.postings.length > 0 && e.total === seen;
    seen = e.total;
    if (!settled) await new Promise((r) => setTimeout(r, 700));
    return settled ? e : null;
  }, 'the host earnings posted and settled');
  const feeRate = Number([...earnings.postings].sort((a, b) => b.postedAt.localeCompare(a.postedAt))[0].feeRate);
  assert.ok(feeRate > 0 && feeRate < 1, `a fee rate from the API: ${feeRate}`);
  console.log(`# earnings data ready in ${((Date.now() - t0) / 1000).toFixed(1)} s; fee rate ${feeRate}`);

  // In the portal: log in.
  const context = await browser.newContext({ viewport: { width: 1100, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  /** @type {string[]} */
  const consoleErrors = [];
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
  });
  await page.goto(`${BASE}/portal`);
  await page.getByRole('tab', { name: 'Log in' }).click();
  await page.getByLabel('Email').fill(host.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
  const row = page.getByRole('listitem').filter({ has: page.getByRole('heading', { name: 'earning-rig' }) });
  await row.waitFor();

  /** @param {number} n @param {number} [digits] */
  const fmt = (n, digits) =>
    page.evaluate(
      ({ n, c, digits }) =>
        new Intl.NumberFormat(undefined, {
          style: 'currency',
          currency: c,
          ...(digits === undefined ? {} : { minimumFractionDigits: digits, maximumFractionDigits: digits }),
        }).format(n),
      { n, c: earnings.currency, digits },
    );

  // The preview: 0.80 less the API's fee rate, per GPU-hour and per day for
  // 2 GPUs at the utilisation (70 % by default, then 40 %).
  const preview = row.getByRole('group', { name: 'Earnings preview' });
  for (const utilisation of [70, 40]) {
    if (utilisation !== 70) await preview.getByLabel('Utilisation (%)').fill(String(utilisation));
    const net = 0.8 * (1 - feeRate);
    assert.equal(await preview.getByTestId('gross-hour').innerText(), await fmt(0.8, 4));
    assert.equal(await preview.getByTestId('net-hour').innerText(), await fmt(net, 4));
    assert.equal(await preview.getByTestId('net-day').innerText(), await fmt(net * 2 * 24 * (utilisation / 100)));
    await preview.getByText(`at ${utilisation} %`).waitFor();
  }
  assert.equal(await preview.getByTestId('fee-unknown').count(), 0, 'no gross-only note when the fee rate is known');
  await preview.getByLabel('Utilisation (%)').fill('70');

  // The earnings: the total, and today's bar for the machine, with the chart
  // as a table.
  const card = page.getByRole('region', { name: 'Earnings', exact: true });
  // The total as the API has it (a late part of the usage may still post:
  // then reload once and compare again).
  for (let attempt = 1; ; attempt++) {
    const shown = await card.getByTestId('earnings-total').innerText();
    const total = Number((await gql('{ hostEarnings { total } }', {}, host.token)).hostEarnings.total);
    assert.ok(total > 0, `earnings posted: ${total}`);
    const expected = await fmt(total, total < 1 ? 4 : undefined);
    if (shown === expected || attempt === 3) {
      assert.equal(shown, expected);
      break;
    }
    await page.reload();
    await row.waitFor();
  }
  const chart = card.getByRole('img', { name: /Earnings per machine and UTC day/ });
  await chart.waitFor();
  assert.ok((await chart.locator('rect').count()) >= 1, 'a bar for the day with earnings');
  await card.getByText('The chart as a table').click();
  const today = new Date().toISOString().slice(0, 10);
  const tableRow = card.getByRole('row').filter({ hasText: today });
  await tableRow.getByRole('cell', { name: 'earning-rig' }).waitFor();
  await card.getByTestId('statements-empty').waitFor();
  await card.getByTestId('payouts-empty').waitFor();
  await row.getByText('Live state and verification').click();
  await row.getByText('Reliability', { exact: true }).waitFor();
  await checkA11y(page, 'machine list with earnings (chart table and state open)');
  await page.screenshot({ path: join(SHOTS, '13-host-with-earnings.png'), fullPage: true });
  await card.screenshot({ path: join(SHOTS, '14-earnings-chart.png') });

  // Phone width: the same page fits.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(100);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'machine list with earnings at phone width');

  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
});
