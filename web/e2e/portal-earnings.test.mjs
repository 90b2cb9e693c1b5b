// End-to-end: a host with earnings sees, in the portal, the earnings
// preview computed from the API's platform fee rate, the per-machine,
// per-day earnings chart with its table, and the totals. The earnings are
// made through the public GraphQL API from node: the host lists a machine
// and runs its agent (simulated GPUs), a renter with credit from the demo
// operator (seeded by `gpumarket dev`) rents it for a few seconds.
// Needs GPUMARKET_WEB_E2E_URL and GPUMARKET_E2E_AGENT_BIN (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  AGENT_BIN,
  BASE,
  PASSWORD,
  SHOTS,
  gql,
  grantCredit,
  browserForFile,
  listedMachine,
  operatorToken,
  pageMoney,
  rentOneGpu,
  signUp,
  startAgent,
  until,
  watchedPage,
} from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile('page state');

test('a host with earnings sees the preview from the API fee rate, the earnings chart and its table', { skip: !AGENT_BIN && 'GPUMARKET_E2E_AGENT_BIN is not set' }, async () => {
  const t0 = Date.now();
  const host = await signUp('HOST', 'earnings-host');
  const models = (await gql('{ gpuModels { name vramGib } }')).gpuModels;
  const model = models[0];
  const { machineId, agentToken } = await listedMachine(host.token, model, {
    name: 'earning-rig',
    country: 'NL',
    idempotencyKey: `earnings-${Date.now()}`,
    pricePerGpuHour: '0.80',
  });
  startAgent(['agent', '--machine-id', machineId, '--token', agentToken], model.name, model.vramGib);

  // A renter with credit rents one GPU for a moment, then stops.
  const renter = await signUp('RENTER', 'earnings-renter');
  const op = await operatorToken();
  await grantCredit(op, renter.tenantId, '50', `earnings-credit-${Date.now()}`);
  const ordered = await rentOneGpu(renter.token, machineId, `earnings-order-${Date.now()}`, 300);
  await new Promise((r) => setTimeout(r, 2000));
  await gql('mutation($id: ID!) { stopInstance(id: $id) { id } }', { id: ordered.id }, renter.token);
  // The usage is posted in parts: wait until the total holds still.
  /** @type {string | null} */
  let seen = null;
  const earnings = await until(async () => {
    const e = (await gql('{ hostEarnings { total currency postings { feeRate postedAtUtc } } }', {}, host.token)).hostEarnings;
    const settled = e.postings.length > 0 && e.total === seen;
    seen = e.total;
    if (!settled) await new Promise((r) => setTimeout(r, 700));
    return settled ? e : null;
  }, 'the host earnings posted and settled', 30_000, 300);
  const feeRate = Number([...earnings.postings].sort((a, b) => Date.parse(b.postedAtUtc) - Date.parse(a.postedAtUtc))[0].feeRate);
  assert.ok(feeRate > 0 && feeRate < 1, `a fee rate from the API: ${feeRate}`);
  // The public terms the preview uses are the rate billing charged.
  assert.equal(Number((await gql('{ platform { platformFeeRate } }')).platform.platformFeeRate), feeRate);
  console.log(`# earnings data ready in ${((Date.now() - t0) / 1000).toFixed(1)} s; fee rate ${feeRate}`);

  // In the portal: log in.
  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors } = await watchedPage(context);
  await page.goto(`${BASE}/portal`);
  await page.getByRole('tab', { name: 'Log in' }).click();
  await page.getByLabel('Email').fill(host.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
  const row = page.getByRole('listitem').filter({ has: page.getByRole('heading', { name: 'earning-rig' }) });
  await row.waitFor();

  const fmt = pageMoney(page, earnings.currency);

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
