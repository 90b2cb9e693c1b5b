// End-to-end: a renter's billing dashboard at /billing. The data is made
// through the public GraphQL API from node, as any client could: a host
// lists a machine and runs its agent (simulated GPUs), a renter signs up,
// the demo operator (seeded by `gpumarket dev`) grants it credit, and the
// renter rents the machine. Then, in Chromium, the renter logs in at
// /billing and sees its balance and the running instance's cost growing;
// once the instance is stopped through the API, the page shows it stopped.
// Needs GPUMARKET_WEB_E2E_URL and GPUMARKET_E2E_AGENT_BIN (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import {
  AGENT_BIN,
  BASE,
  PASSWORD,
  gql,
  grantCredit,
  browserForFile,
  listedMachine,
  operatorToken,
  rentOneGpu,
  shot,
  signUp,
  startAgent,
  until,
  watchedPage,
} from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile('billing page state');

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
  const { machineId, agentToken } = await listedMachine(host.token, model, {
    name: 'billing-rig',
    country: 'DE',
    idempotencyKey: `billing-${Date.now()}`,
    pricePerGpuHour: '1.80',
    storagePricePerGbMonth: '5.00',
  });
  startAgent(['agent', '--machine-id', machineId, '--token', agentToken], model.name, model.vramGib);

  // A renter with credit from the demo operator.
  const renter = await signUp('RENTER', 'billing-renter');
  const op = await operatorToken();
  await grantCredit(op, renter.tenantId, '1.00', `billing-credit-${Date.now()}`);

  // The renter rents one GPU of the machine once it is online and offered.
  const ordered = await rentOneGpu(renter.token, machineId, `billing-order-${Date.now()}`);
  console.log(`# data ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  // In the browser: log in at /billing.
  const context = await browser().newContext({ viewport: { width: 1100, height: 900 }, acceptDownloads: true });
  const { page, consoleErrors, requests } = await watchedPage(context);

  await page.goto(`${BASE}/billing`);
  await page.getByRole('heading', { name: 'Log in to see your billing' }).waitFor();
  await checkA11y(page, 'billing login form');
  await page.getByLabel('Email').fill(renter.email);
  await page.getByLabel('Password').fill('wrong password');
  await page.getByRole('button', { name: 'Log in' }).click();
  assert.match(await page.getByRole('alert').innerText(), /UNAUTHENTICATED/);
  await checkA11y(page, 'billing login error');
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
  await checkA11y(page, 'billing dashboard, running instance');
  await shot(page, 'billing-01-running');

  // At phone width the page does not scroll sideways (tables scroll inside
  // their own focusable, labelled region).
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(200);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'billing dashboard at 390 px');
  await shot(page, 'billing-01-running-phone');
  await page.setViewportSize({ width: 1100, height: 900 });

  // Stopped through the API: the page shows it stopped, with its cost fixed.
  await gql('mutation($id: ID!) { stopInstance(id: $id) { id state } }', { id: ordered.id }, renter.token);
  await row.getByText('stopped', { exact: true }).waitFor();
  // Storage is billed while stopped: the burn is the disk's alone.
  await page.getByText(/^0 running instances$/).waitFor();
  await checkA11y(page, 'billing dashboard, instance stopped');
  await shot(page, 'billing-02-stopped');

  // Once the usage is settled, the operator invoices it (period ending now):
  // the chart has a bar for today, and the invoice opens on its lines.
  await until(
    async () =>
      (await gql('query($f: DateTime!, $t: DateTime!) { usageSeries(bucket: DAY, groupBy: GPU_MODEL, fromUtc: $f, toUtc: $t) { points { key } } }', {
        f: new Date(Date.now() - 86_400_000).toISOString(),
        t: new Date(Date.now() + 86_400_000).toISOString(),
      }, renter.token)).usageSeries.points.some((/** @type {any} */ p) => p.key === model.name),
    'the usage settled',
  );
  const run = (
    await gql(
      'mutation($e: DateTime, $t: ID) { runInvoices(periodEndUtc: $e, tenantId: $t) { invoices { number lines { meterKind } } } }',
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
  await checkA11y(page, 'billing invoice expanded');
  await shot(page, 'billing-03-invoice');
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(200);
  const overflow2 = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow2 <= 0, `no sideways scrolling at 390 px with the invoice open (${overflow2} px too wide)`);
  await checkA11y(page, 'billing invoice expanded at 390 px');
  await shot(page, 'billing-03-invoice-phone');
  await page.setViewportSize({ width: 1100, height: 900 });

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
