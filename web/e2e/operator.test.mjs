// End-to-end: the operators' view of the billing dashboard at /billing. The
// data is made through the public GraphQL API from node: a host lists a
// machine and runs its agent (simulated GPUs); a renter gets $1 of credit
// (about half an hour at $1.80/h, under billing's one-hour low-runway
// threshold) and a GPU quota of one, and rents one GPU. A renter sees no
// operator section and the API refuses it `marketplaceOverview`
// (FORBIDDEN). The demo operator (seeded by `gpumarket dev`) logs in and
// sees the marketplace's volume and fees, the GPUs listed, online and
// rented per model, the renter at 100 % of its GPU quota and on the
// out-of-credit list for its runway; every number on the page is checked
// against the API. Needs GPUMARKET_WEB_E2E_URL and GPUMARKET_E2E_AGENT_BIN
// (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  AGENT_BIN,
  BASE,
  OPERATOR,
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

const browser = browserForFile('operator page state');

const OVERVIEW = `query($f: DateTime!, $t: DateTime!) {
  marketplaceOverview(fromUtc: $f, toUtc: $t, bucket: DAY, nearQuotaPercent: 80) {
    volume { currency totalVolume totalFees totalHostEarnings totalFeeRevenue points { bucketStartUtc volume fees } }
    gpuSupply { listedGpus onlineGpus rentedGpus models { gpuModel listedGpus onlineGpus rentedGpus } }
    nearQuota { tenants { tenantId tenantName dimensions { quota limit used percent } } }
    outOfCredit { warnBelowSeconds tenants { tenantId tenantName reasons balance runwaySeconds } }
  } }`;

/** The page's window: the last 30 UTC days, today included. */
function window30() {
  const now = new Date();
  const end = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() + 1);
  return { f: new Date(end - 30 * 86_400_000).toISOString(), t: new Date(end).toISOString() };
}

/** The overview as the operator's API call sees it now. @param {string} op */
async function overview(op) {
  return (await gql(OVERVIEW, window30(), op)).marketplaceOverview;
}

/** The raw GraphQL answer, errors included. @param {string} token */
async function rawOverview(token) {
  const res = await fetch(`${BASE}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: OVERVIEW, variables: window30() }),
  });
  return res.json();
}

/**
 * Waits until what the page shows equals what the API answers around the
 * same moment (the ledger moves with every settlement, and the page polls
 * every 30 s, so a value is compared with the API's before and after it).
 * @param {() => Promise<string | null>} shown @param {(o: any) => string} fromApi @param {string} op @param {string} what
 */
async function matches(shown, fromApi, op, what) {
  let last = '';
  await until(
    async () => {
      const before = fromApi(await overview(op));
      const onPage = await shown();
      const afterwards = fromApi(await overview(op));
      last = `page ${onPage}, API ${before} / ${afterwards}`;
      return onPage !== null && (onPage === before || onPage === afterwards);
    },
    `${what} on the page equal to the API (${last})`,
    75_000,
    1000,
  );
}

test('an operator sees marketplace volume, fees, GPU supply and the tenants at risk, as the API has them', { skip: !AGENT_BIN && 'GPUMARKET_E2E_AGENT_BIN is not set' }, async () => {
  const t0 = Date.now();
  const op = await operatorToken();
  const host = await signUp('HOST', 'op-host');
  const models = (await gql('{ gpuModels { name vramGib } }')).gpuModels;
  const model = models[models.length - 1];
  const { machineId, agentToken } = await listedMachine(host.token, model, {
    name: 'op-rig',
    country: 'DE',
    idempotencyKey: `op-${Date.now()}`,
    pricePerGpuHour: '1.80',
  });
  startAgent(['agent', '--machine-id', machineId, '--token', agentToken], model.name, model.vramGib);

  const renter = await signUp('RENTER', 'op-renter');
  await grantCredit(op, renter.tenantId, '1.00', `op-credit-${Date.now()}`);
  await gql('mutation($t: ID!) { setTenantQuota(tenantId: $t, maxGpus: 1) { maxGpus } }', { t: renter.tenantId }, op);
  await rentOneGpu(renter.token, machineId, `op-order-${Date.now()}`);

  // Not for renters: the API refuses, with its code.
  const refused = await rawOverview(renter.token);
  assert.equal(refused.errors?.[0]?.extensions?.code, 'FORBIDDEN', JSON.stringify(refused));

  // The renter is on both lists once billing's spend watch has measured its
  // runway (every settlement interval) and usage has been charged.
  await until(
    async () => {
      const o = await overview(op);
      return (
        o.outOfCredit.tenants.some((/** @type {any} */ t) => t.tenantId === renter.tenantId && t.reasons.includes('LOW_RUNWAY')) &&
        o.nearQuota.tenants.some((/** @type {any} */ t) => t.tenantId === renter.tenantId) &&
        o.volume.points.length > 0
      );
    },
    'the renter listed and usage charged',
    60_000,
    1000,
  );
  console.log(`# data ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  // A renter's dashboard has no operator section.
  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const renterView = await watchedPage(context);
  await renterView.page.goto(`${BASE}/billing`);
  await renterView.page.getByLabel('Email').fill(renter.email);
  await renterView.page.getByLabel('Password').fill(PASSWORD);
  await renterView.page.getByRole('button', { name: 'Log in' }).click();
  await renterView.page.getByTestId('billing-balance').waitFor();
  await renterView.page.getByRole('heading', { name: 'Instances' }).waitFor();
  assert.equal(await renterView.page.getByTestId('operator-overview').count(), 0, 'no operator section for a renter');
  await renterView.page.getByRole('button', { name: 'Log out' }).click();
  await renterView.page.close();

  // The operator logs in.
  const { page, consoleErrors, requests } = await watchedPage(context);
  await page.goto(`${BASE}/billing`);
  await page.getByLabel('Email').fill(OPERATOR.email);
  await page.getByLabel('Password').fill(OPERATOR.password);
  await page.getByRole('button', { name: 'Log in' }).click();
  const section = page.getByTestId('operator-overview');
  await section.getByRole('heading', { name: 'Marketplace (operators)' }).waitFor();
  await section.getByTestId('op-total-volume').waitFor();
  // The platform tenant rents nothing: no renter balance (or low-balance
  // warning) of its own below the overview.
  assert.equal(await page.getByTestId('billing-balance').count(), 0, 'no renter sections for an operator');

  // Volume and fees: the page's exact amounts are the API's.
  const exact = (/** @type {string} */ id) => async () => section.getByTestId(id).getAttribute('data-exact');
  await matches(exact('op-total-volume'), (o) => o.volume.totalVolume, op, 'volume');
  await matches(exact('op-total-fees'), (o) => o.volume.totalFees, op, 'fees');
  await matches(exact('op-total-host'), (o) => o.volume.totalHostEarnings, op, "hosts' share");
  // The display is the exact amount rounded half-even to the cent.
  const o = await overview(op);
  assert.ok(Number(o.volume.totalVolume) > 0 && Number(o.volume.totalFees) > 0, JSON.stringify(o.volume));
  assert.match(await section.getByTestId('op-total-volume').innerText(), /^\$\d[\d,]*\.\d{2}$/);
  const chart = section.getByRole('img', { name: /Marketplace volume per day over 30 days/ });
  await chart.waitFor();
  await section.getByText('Volume and fees per day as a table').click();
  await section.locator(`[data-testid="op-volume-day"][data-day="${new Date().toISOString().slice(0, 10)}"]`).waitFor();

  // GPU supply of the renter's model: listed, online, rented as the API has them.
  const supplyRow = section.locator(`[data-testid="op-supply-row"][data-model="${model.name}"]`);
  await supplyRow.waitFor();
  for (const [testId, field] of /** @type {const} */ ([
    ['op-listed', 'listedGpus'],
    ['op-online', 'onlineGpus'],
    ['op-rented', 'rentedGpus'],
  ])) {
    await matches(
      async () => supplyRow.getByTestId(testId).innerText(),
      (ov) => String(ov.gpuSupply.models.find((/** @type {any} */ m) => m.gpuModel === model.name)?.[field]),
      op,
      `${model.name} ${field}`,
    );
  }
  assert.ok(Number(await supplyRow.getByTestId('op-rented').innerText()) >= 1, 'the renter rents one of them');
  await matches(async () => section.getByTestId('op-listed-total').innerText(), (ov) => String(ov.gpuSupply.listedGpus), op, 'GPUs listed');
  await matches(async () => section.getByTestId('op-rented-total').innerText(), (ov) => String(ov.gpuSupply.rentedGpus), op, 'GPUs rented');

  // The renter near its quota: one GPU of one.
  const near = section.locator(`[data-testid="op-near-quota"][data-tenant-id="${renter.tenantId}"][data-quota="max_gpus"]`);
  await near.waitFor();
  const apiNear = o.nearQuota.tenants
    .find((/** @type {any} */ t) => t.tenantId === renter.tenantId)
    .dimensions.find((/** @type {any} */ d) => d.quota === 'max_gpus');
  assert.equal(await near.getByTestId('op-near-used').innerText(), `${apiNear.used} of ${apiNear.limit}`);
  assert.equal(await near.getByTestId('op-near-percent').innerText(), `${apiNear.percent} %`);
  assert.equal(`${apiNear.used}/${apiNear.limit}/${apiNear.percent}`, '1/1/100');
  await near.getByText('E2E op-renter').waitFor();

  // The renter out of credit (low runway), with its balance as billing has it.
  const risk = section.locator(`[data-testid="op-out-of-credit"][data-tenant-id="${renter.tenantId}"]`);
  await risk.waitFor();
  await risk.getByText('low runway').waitFor();
  await matches(
    async () => risk.getByTestId('op-credit-balance').getAttribute('data-exact'),
    (ov) => ov.outOfCredit.tenants.find((/** @type {any} */ t) => t.tenantId === renter.tenantId)?.balance,
    op,
    "the renter's balance",
  );
  await checkA11y(page, 'operator overview');
  await shot(page, 'operator-01-overview');

  // At phone width the page does not scroll sideways.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(200);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'operator overview at 390 px');
  await shot(page, 'operator-01-overview-phone');
  await page.setViewportSize({ width: 1100, height: 900 });

  // Another window: the chart follows it.
  await section.getByLabel('Window').selectOption('7');
  await section.getByRole('img', { name: /Marketplace volume per day over 7 days/ }).waitFor();
  await checkA11y(page, 'operator overview, 7 days');

  const other = requests.filter((p) => !p.startsWith('/portal') && !p.startsWith('/billing') && p !== '/graphql');
  assert.deepEqual(other, [], 'requests outside the public API');
  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
  console.log(`# operator test in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
