// End-to-end: the balance history on /billing, after real usage. Through the
// public API a host lists a machine and runs its agent (simulated GPUs), the
// demo operator grants a renter credit in more small grants than fit on one
// page, and the renter rents a GPU. In Chromium the renter sees the history
// newest first (usage on top), the burn rate as the API gives it, pages back
// to the first credit with the keyboard, and, once the instance is destroyed
// and the ledger still, every row equals the API's entry exactly, each
// running balance is the one below it plus the row's amount, and the newest
// equals the balance. Needs GPUMARKET_WEB_E2E_URL and GPUMARKET_E2E_AGENT_BIN
// (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
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
import { decimal, historyRows, signedUsd, usd } from './billing-money.mjs';

/** The page size of the history (HISTORY_PAGE in src/billing/BalanceHistory.tsx). */
const PAGE = 20;
const GRANTS = PAGE + 3;

const browser = browserForFile('balance history state');

const HISTORY = `query($after: String) { balanceHistory(first: 200, after: $after) {
  balance currency nodes { cursor kind amount balanceAfter postedAtUtc } pageInfo { endCursor hasNextPage } } }`;

/** Every entry of the renter's balance, newest first, from the API. @param {string} token */
async function apiHistory(token) {
  /** @type {any[]} */
  const all = [];
  /** @type {string | null} */
  let cursor = null;
  let balance = '';
  for (;;) {
    /** @type {any} */
    const got = (await gql(HISTORY, { after: cursor }, token)).balanceHistory;
    if (!balance) balance = got.balance;
    all.push(...got.nodes);
    if (!got.pageInfo.hasNextPage) return { balance, currency: got.currency, entries: all };
    cursor = got.pageInfo.endCursor;
  }
}

test('the balance history after real usage: newest first, paged, equal to the ledger', { skip: !AGENT_BIN && 'GPUMARKET_E2E_AGENT_BIN is not set' }, async () => {
  const t0 = Date.now();
  const host = await signUp('HOST', 'history-host');
  const models = (await gql('{ gpuModels { name vramGib } }')).gpuModels;
  const model = models[models.length - 1];
  const { machineId, agentToken } = await listedMachine(host.token, model, {
    name: 'history-rig',
    country: 'NL',
    idempotencyKey: `history-${Date.now()}`,
    pricePerGpuHour: '1.80',
    storagePricePerGbMonth: '5.00',
  });
  startAgent(['agent', '--machine-id', machineId, '--token', agentToken], model.name, model.vramGib);

  // More credit entries than fit on one page, then usage on top of them.
  const renter = await signUp('RENTER', 'history-renter');
  const op = await operatorToken();
  for (let i = 0; i < GRANTS; i++) await grantCredit(op, renter.tenantId, '0.05', `history-credit-${Date.now()}-${i}`);
  const ordered = await rentOneGpu(renter.token, machineId, `history-order-${Date.now()}`);
  await until(
    async () => (await gql('{ balanceHistory(first: 1) { nodes { kind } } }', {}, renter.token)).balanceHistory.nodes[0]?.kind === 'usage',
    'a usage entry',
  );
  console.log(`# data ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors, requests } = await watchedPage(context);
  await page.goto(`${BASE}/billing`);
  await page.getByLabel('Email').fill(renter.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();

  // The burn rate beside balance and runway, as the API gives it, rounded half-even.
  await page.getByText(/^1 running instance$/).waitFor();
  const burn = (await gql('{ runway { burnRatePerHour currency } }', {}, renter.token)).runway;
  assert.equal(burn.currency, 'USD');
  assert.ok(decimal(burn.burnRatePerHour) > 0n, `a burn rate while running: ${burn.burnRatePerHour}`);
  const burnShown = page.locator('.billing-stats > div').filter({ has: page.getByText('Burn rate', { exact: true }) });
  assert.equal(await burnShown.locator('.billing-big').innerText(), `${usd(burn.burnRatePerHour)}/h`);

  // The first page, newest first: usage on top, a full page, the chart.
  const history = page.getByTestId('billing-history');
  await history.waitFor();
  const rows = history.locator('tbody tr');
  assert.equal(await rows.count(), PAGE, 'one page of entries');
  assert.match(await rows.first().getByTestId('billing-history-kind').innerText(), /^usage/);
  assert.match(await rows.first().locator('td').nth(0).innerText(), /^\u2212\$\d+\.\d{2}\n-0\.\d+$/, 'a charge is negative');
  await page.getByRole('img', { name: new RegExp(`^Running balance over the ${PAGE} entries shown`) }).waitFor();
  await checkA11y(page, 'balance history, first page');
  await shot(page, 'billing-history-01-first-page');

  // Older pages from the keyboard, down to the first credit.
  const older = page.getByRole('button', { name: 'Load older entries' });
  await older.focus();
  await page.keyboard.press('Enter');
  await page.getByTestId('billing-history-end').waitFor();
  assert.equal(await older.count(), 0, 'no more pages to load');
  assert.equal(
    await page.evaluate(() => document.activeElement?.getAttribute('data-testid')),
    'billing-history-end',
    'the focus moves to the end of the history, not lost with the button',
  );
  const oldest = rows.last();
  assert.match(await oldest.getByTestId('billing-history-kind').innerText(), /^credit/);
  assert.match(await oldest.locator('td').nth(0).innerText(), /^\+\$0\.05\n0\.050*$/, 'the first credit');

  // The chart's table alternative opens from the keyboard.
  const summary = page.getByText('Running balance as a table');
  await summary.focus();
  await page.keyboard.press('Enter');
  await page.getByRole('table').filter({ hasText: 'Running balance after each entry' }).waitFor();
  await checkA11y(page, 'balance history, every page, chart table open');

  // The instance destroyed, the ledger still: the page's rows are the API's.
  await gql('mutation($id: ID!) { destroyInstance(id: $id) { id } }', { id: ordered.id }, renter.token);
  let api = await apiHistory(renter.token);
  await until(
    async () => {
      await new Promise((r) => setTimeout(r, 12_000));
      const again = await apiHistory(renter.token);
      const still = again.entries[0].cursor === api.entries[0].cursor;
      api = again;
      return still;
    },
    'the ledger still after the destroy',
    90_000,
    0,
  );
  await history.locator(`tbody tr:first-child[data-cursor="${api.entries[0].cursor}"]`).waitFor({ timeout: 15_000 });
  await page.waitForFunction(
    (n) => document.querySelectorAll('[data-testid="billing-history"] tbody tr').length === n,
    api.entries.length,
  );
  const shown = await historyRows(page);
  assert.equal(shown.length, api.entries.length, 'every entry shown');
  for (const [i, e] of api.entries.entries()) {
    const row = shown[i];
    assert.equal(row.cursor, e.cursor, `row ${i} is the API's entry ${i}`);
    assert.ok(row.kind.startsWith(e.kind.replace(/_/g, ' ')), `row ${i} kind ${row.kind} is ${e.kind}`);
    assert.equal(decimal(row.exactAmount), decimal(e.amount), `row ${i} amount`);
    assert.equal(decimal(row.exactBalance), decimal(e.balanceAfter), `row ${i} running balance`);
    assert.equal(row.amount, signedUsd(e.amount), `row ${i} rounded amount`);
    assert.equal(row.balance, usd(e.balanceAfter), `row ${i} rounded running balance`);
    assert.equal(row.time, `${new Date(e.postedAtUtc).toISOString().slice(0, 19).replace('T', ' ')} UTC`);
    // Each running balance is the one before it plus the entry's amount.
    const before = i + 1 < shown.length ? decimal(shown[i + 1].exactBalance) : 0n;
    assert.equal(decimal(row.exactBalance), before + decimal(row.exactAmount), `row ${i} adds up`);
  }
  assert.equal(shown.filter((r) => r.kind.startsWith('credit')).length, GRANTS, 'every grant');
  assert.ok(shown.some((r) => r.kind.startsWith('usage')), 'usage entries');

  // The newest running balance is the balance, exactly, on the API and the page.
  const now = await gql('{ balance { amount currency } runway { balance } }', {}, renter.token);
  assert.equal(decimal(shown[0].exactBalance), decimal(now.balance.amount), 'newest running balance = balance');
  assert.equal(decimal(shown[0].exactBalance), decimal(now.runway.balance), 'newest running balance = runway balance');
  assert.equal(decimal(api.balance), decimal(now.balance.amount), "the history's balance = balance");
  await page.getByTestId('billing-balance').filter({ hasText: usd(now.balance.amount) }).waitFor();
  assert.equal(await page.getByTestId('billing-balance').innerText(), shown[0].balance, 'balance card = newest row');
  await checkA11y(page, 'balance history, ledger still');
  await shot(page, 'billing-history-02-all');

  // At phone width the page does not scroll sideways.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(200);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'balance history at 390 px');
  await shot(page, 'billing-history-03-phone');

  const other = requests.filter((p) => !p.startsWith('/portal') && !p.startsWith('/billing') && p !== '/graphql');
  assert.deepEqual(other, [], 'requests outside the public API');
  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
  console.log(`# balance history test in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});

test('the balance history empty, loading and failing', async () => {
  // A renter with no entries yet.
  const renter = await signUp('RENTER', 'history-empty');
  const context = await browser().newContext({ viewport: { width: 390, height: 844 } });
  const { page, consoleErrors } = await watchedPage(context);
  await page.goto(`${BASE}/billing`);
  await page.getByLabel('Email').fill(renter.email);
  await page.getByLabel('Password').fill(PASSWORD);

  // Held back: the history shows it is loading.
  /** @type {() => void} */
  let release = () => {};
  const held = new Promise((/** @type {(v?: unknown) => void} */ r) => (release = r));
  await page.route('**/graphql', async (route) => {
    if (/BillingBalanceHistory/.test(route.request().postData() ?? '')) await held;
    await route.continue();
  });
  await page.getByRole('button', { name: 'Log in' }).click();
  const card = page.getByRole('region', { name: 'Balance history', exact: true });
  await card.getByText('Loading…').waitFor();
  await checkA11y(page, 'balance history loading');
  await shot(page, 'billing-history-04-loading');
  release();
  await card.getByText(/^No entries yet/).waitFor();
  await checkA11y(page, 'balance history empty');
  await shot(page, 'billing-history-05-empty');

  // The API failing (simulated: the gateway does not fail on demand): the
  // error with its code, in the card, and the rest of the page still there.
  await page.unroute('**/graphql');
  await page.route('**/graphql', async (route) => {
    if (!/BillingBalanceHistory/.test(route.request().postData() ?? '')) return route.continue();
    await route.fulfill({
      status: 200,
      contentType: 'application/json',
      body: JSON.stringify({ data: null, errors: [{ message: 'billing is unavailable', extensions: { code: 'UNAVAILABLE' } }] }),
    });
  });
  await page.reload();
  await card.getByRole('alert').filter({ hasText: 'billing is unavailable UNAVAILABLE' }).waitFor();
  assert.equal(await card.getByText('Loading…').count(), 0, 'not loading any more');
  await page.getByTestId('billing-balance').waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'balance history error');
  await shot(page, 'billing-history-06-error');
  await page.unroute('**/graphql');
  // The failure is the simulated one; nothing else went wrong.
  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
});
