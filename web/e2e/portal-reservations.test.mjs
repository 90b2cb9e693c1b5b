// End-to-end: a host offers a machine for reserved blocks from the portal,
// a renter books a future block through the public GraphQL API, and the
// portal shows the block in the machine's calendar (which GPU, which hours),
// in its list of blocks, and in the reserved earnings to come; the host then
// cancels the block with a reason. The host lists a 2-GPU machine through the
// API and runs its agent with simulated GPUs, as portal-mig.test.mjs does; a
// renter with credit from the demo operator reserves. Needs
// GPUMARKET_WEB_E2E_URL and GPUMARKET_E2E_AGENT_BIN (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import {
  AGENT_BIN,
  BASE,
  PASSWORD,
  SHOTS,
  browserForFile,
  gql,
  grantCredit,
  listedMachine,
  operatorToken,
  reserveBlock,
  signUp,
  startAgent,
  until,
  watchedPage,
  wholeHoursFromNow,
} from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile('page state');

test('a host sets reserved terms in the portal and sees a renter\'s block in its calendar and earnings to come', { skip: !AGENT_BIN && 'GPUMARKET_E2E_AGENT_BIN is not set' }, async () => {
  const models = (await gql('{ gpuModels { name vramGib } }')).gpuModels;
  const model = models[models.length - 1];
  const host = await signUp('HOST', 'rsv-host');
  const { machineId, agentToken } = await listedMachine(host.token, model, {
    name: 'rsv-rig',
    country: 'NL',
    idempotencyKey: `rsv-${Date.now()}`,
    pricePerGpuHour: '1.50',
  });
  startAgent(['agent', '--machine-id', machineId, '--token', agentToken], model.name, model.vramGib);

  // In the portal: log in; the machine's reservations, none offered yet.
  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors } = await watchedPage(context);
  await page.goto(`${BASE}/portal`);
  await page.getByRole('tab', { name: 'Log in' }).click();
  await page.getByLabel('Email').fill(host.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
  const row = page.getByRole('listitem').filter({ has: page.getByRole('heading', { name: 'rsv-rig' }) });
  await row.waitFor();
  await row.locator('summary').filter({ hasText: /^Reservations$/ }).click();
  const section = row.getByTestId('machine-reservations');
  await section.getByText('This machine takes no reservations').waitFor();
  await section.getByText('No blocks booked.').waitFor();
  await checkA11y(page, 'machine reservations, no terms');

  // Terms through the form: a lead time of 0 days is the API's VALIDATION
  // error, shown at its field; then 30 days.
  await section.getByLabel(/^Reserved price per GPU-hour/).fill('2.00');
  await section.getByLabel('Bookable days ahead').fill('0');
  await section.getByLabel('Shortest block (hours)').fill('2');
  await section.getByRole('button', { name: 'Save reserved terms' }).click();
  const leadError = section.locator(`#rsv-lead-${machineId}-error`);
  await leadError.waitFor();
  assert.match(await leadError.innerText(), /^maxLeadDays: .*VALIDATION$/s);
  assert.equal(await section.getByLabel('Bookable days ahead').getAttribute('aria-invalid'), 'true');
  await checkA11y(page, 'machine reservations, invalid terms');
  await section.getByLabel('Bookable days ahead').fill('30');
  await section.getByRole('button', { name: 'Save reserved terms' }).click();
  await section.getByRole('status').filter({ hasText: 'Reserved terms saved.' }).waitFor();
  await section.getByText(/Renters can book blocks of at least 2 h, ending within 30 days/).waitFor();
  const calendarQuery =
    'query($id: ID!, $from: DateTime!, $to: DateTime!) { machineCalendar(machineId: $id, from: $from, to: $to) { terms { pricePerGpuHour maxLeadDays minBlockHours } hours { startsAt freeGpus } bookings { reservationId gpuIndex startsAt endsAt } } }';
  const window_ = { id: machineId, from: wholeHoursFromNow(0), to: wholeHoursFromNow(24) };
  const terms = (await gql(calendarQuery, window_, host.token)).machineCalendar.terms;
  assert.deepEqual(
    { ...terms, pricePerGpuHour: Number(terms.pricePerGpuHour) },
    { pricePerGpuHour: 2, maxLeadDays: 30, minBlockHours: 2 },
    'the API has the terms as typed',
  );

  // A renter with credit books one GPU for 4 hours, 3 hours from now.
  const renter = await signUp('RENTER', 'rsv-renter');
  const op = await operatorToken();
  await grantCredit(op, renter.tenantId, '100', `rsv-credit-${Date.now()}`);
  const startsAt = wholeHoursFromNow(3);
  const endsAt = wholeHoursFromNow(7);
  /** The hour `h` hours after the block's start. @param {number} h */
  const hourOf = (h) => new Date(Date.parse(startsAt) + h * 3_600_000).toISOString();
  const block = await reserveBlock(renter.token, machineId, {
    gpuCount: 1,
    startsAt,
    endsAt,
    maxPricePerGpuHour: '2.00',
    idempotencyKey: `rsv-block-${Date.now()}`,
  });
  assert.equal(block.hours, 4);
  assert.equal(Number(block.amount), 8, 'price × GPUs × hours, charged up front');
  assert.equal(block.gpuIndices.length, 1);
  const gpu = block.gpuIndices[0];

  // The host's calendar: those 4 hours have 1 of 2 GPUs free, the booked
  // one named; the hour before has both.
  await section.getByRole('button', { name: 'Refresh reservations' }).click();
  const calendar = section.getByTestId('reservation-calendar');
  /** The calendar's cell of an hour. @param {string} iso */
  const cell = (iso) => calendar.locator(`td[data-starts-at="${iso}"]`);
  for (let h = 0; h < 4; h += 1) {
    const c = cell(hourOf(h));
    await c.filter({ hasText: `GPU ${gpu} booked` }).waitFor();
    assert.equal(await c.getAttribute('data-free'), '1', `hour ${hourOf(h)}`);
    assert.match(await c.innerText(), /^1\/2/);
  }
  assert.equal(await cell(hourOf(-1)).getAttribute('data-free'), '2', 'the hour before the block');
  assert.equal(await cell(hourOf(4)).getAttribute('data-free'), '2', 'the hour after the block');
  // As the API has it.
  const seen = (await gql(calendarQuery, window_, host.token)).machineCalendar;
  assert.deepEqual(
    seen.bookings.map((/** @type {any} */ b) => [b.reservationId, b.gpuIndex]),
    [[block.id, gpu]],
  );

  // The block in the machine's list, and what is to come from its escrow:
  // the host's share of the 8.00 after the published fee.
  const blockRow = section.locator(`tr[data-reservation-id="${block.id}"]`);
  await blockRow.waitFor();
  assert.equal(await blockRow.getAttribute('data-state'), 'BOOKED');
  assert.match(await blockRow.innerText(), /4 of 4/);
  assert.match(await blockRow.innerText(), /booked/);
  const { reservationTerms, myMachines } = await gql(
    '{ reservationTerms { feeRate cancellationPenaltyRate } myMachines { id reservedEarningsToCome { amount blocks } } }',
    {},
    host.token,
  );
  const toCome = myMachines.find((/** @type {any} */ m) => m.id === machineId).reservedEarningsToCome;
  assert.equal(toCome.blocks, 1);
  assert.ok(
    Math.abs(Number(toCome.amount) - 8 * (1 - Number(reservationTerms.feeRate))) < 1e-9,
    `8.00 less the fee of ${reservationTerms.feeRate}: ${toCome.amount}`,
  );
  const earnings = section.getByTestId('reserved-earnings');
  assert.equal(await earnings.locator('data').getAttribute('value'), toCome.amount);
  assert.match(await earnings.innerText(), /\d+\.\d{2}/);
  await row.screenshot({ path: join(SHOTS, 'reservations-01-booked.png') });
  await checkA11y(page, 'machine reservations, a block booked');

  // Phone width: the calendar and the list scroll inside their regions.
  await page.setViewportSize({ width: 390, height: 844 });
  await blockRow.waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'machine reservations at phone width');
  await page.setViewportSize({ width: 1100, height: 900 });

  // The host cancels the block with a reason: the renter's reservation is
  // cancelled, its escrow gives back what was not released, and the host
  // pays the penalty; nothing is left to come.
  const short = block.id.slice(0, 8);
  await blockRow.getByRole('button', { name: `Cancel block ${short}` }).click();
  const reason = blockRow.getByLabel(`Why cancel ${short}?`);
  assert.ok(await reason.evaluate((el) => el === document.activeElement), 'the reason has the focus');
  await checkA11y(page, 'machine reservations, confirming a cancellation');
  await reason.fill('power maintenance');
  await blockRow.getByRole('button', { name: `Yes, cancel block ${short}` }).click();
  await until(async () => (await blockRow.getAttribute('data-state')) === 'CANCELLED', 'the block cancelled in the portal');
  assert.match(await blockRow.innerText(), /power maintenance/);
  const cancelled = await until(
    async () => {
      const r = (
        await gql(
          'query($id: ID!) { reservation(id: $id) { state reason hoursLeft escrow { amount released fees refunded penalty remaining state } } }',
          { id: block.id },
          renter.token,
        )
      ).reservation;
      return r.state === 'CANCELLED' && r.escrow?.state === 'CANCELLED' ? r : null;
    },
    'the renter\'s reservation and escrow cancelled',
  );
  assert.equal(cancelled.hoursLeft, 0);
  const e = cancelled.escrow;
  const sum = [e.released, e.fees, e.refunded, e.remaining].reduce((a, x) => a + Number(x), 0);
  assert.ok(Math.abs(sum - Number(e.amount)) < 1e-9, `amount = released + fees + refunded + remaining: ${JSON.stringify(e)}`);
  assert.ok(
    Math.abs(Number(e.penalty) - Number(e.refunded) * Number(reservationTerms.cancellationPenaltyRate)) < 1e-6,
    `the penalty is the published share of the refund: ${JSON.stringify(e)}`,
  );
  await until(async () => {
    await section.getByRole('button', { name: 'Refresh reservations' }).click();
    await page.waitForTimeout(300);
    return (await cell(hourOf(0)).getAttribute('data-free')) === '2';
  }, 'the hours free again in the calendar');
  await checkA11y(page, 'machine reservations, block cancelled');
  await row.screenshot({ path: join(SHOTS, 'reservations-02-cancelled.png') });

  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
});
