// End-to-end: a renter's reserved blocks on the billing page. The data is
// made through the public GraphQL API from node: a host lists a 2-GPU
// machine with terms for reserved blocks and runs its agent (simulated
// GPUs); a renter with credit from the demo operator reserves one GPU for 6
// hours, 3 hours from now. In Chromium the renter sees the block (hours
// left, amount, its escrow), lists two of its hours for resale through the
// form (an invalid price first: the API's VALIDATION error at the field),
// sees the listing, and withdraws it. Needs GPUMARKET_WEB_E2E_URL and
// GPUMARKET_E2E_AGENT_BIN (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  AGENT_BIN,
  BASE,
  PASSWORD,
  browserForFile,
  gql,
  grantCredit,
  listedMachine,
  operatorToken,
  reserveBlock,
  setReservedTerms,
  shot,
  signUp,
  startAgent,
  until,
  watchedPage,
  wholeHoursFromNow,
} from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile('billing page state');

const HOUR = 3_600_000;

/** An instant as a `datetime-local` value read as UTC, as the page takes it. @param {string} iso */
function utcInput(iso) {
  return new Date(iso).toISOString().slice(0, 16);
}

test('a renter sees its reserved block, lists two hours for resale and withdraws them', { skip: !AGENT_BIN && 'GPUMARKET_E2E_AGENT_BIN is not set' }, async () => {
  const t0 = Date.now();
  const host = await signUp('HOST', 'rsv-billing-host');
  const models = (await gql('{ gpuModels { name vramGib } }')).gpuModels;
  const model = models[models.length - 1];
  const { machineId, agentToken } = await listedMachine(host.token, model, {
    name: 'rsv-billing-rig',
    country: 'FI',
    idempotencyKey: `rsv-billing-${Date.now()}`,
    pricePerGpuHour: '1.20',
  });
  startAgent(['agent', '--machine-id', machineId, '--token', agentToken], model.name, model.vramGib);
  await setReservedTerms(host.token, machineId, { pricePerGpuHour: '1.50', maxLeadDays: 30, minBlockHours: 2 });

  const renter = await signUp('RENTER', 'rsv-billing-renter');
  const op = await operatorToken();
  await grantCredit(op, renter.tenantId, '100', `rsv-billing-credit-${Date.now()}`);
  const startsAt = wholeHoursFromNow(3);
  const block = await reserveBlock(renter.token, machineId, {
    gpuCount: 1,
    startsAt,
    endsAt: new Date(Date.parse(startsAt) + 6 * HOUR).toISOString(),
    maxPricePerGpuHour: '1.50',
    idempotencyKey: `rsv-billing-block-${Date.now()}`,
  });
  assert.equal(Number(block.amount), 9, '1.50 × 1 GPU × 6 h');
  console.log(`# data ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  // In the browser: log in at /billing.
  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors } = await watchedPage(context);
  await page.goto(`${BASE}/billing`);
  await page.getByLabel('Email').fill(renter.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();

  // The block: 6 of 6 hours left, its amount, its escrow held and nothing
  // released yet, booked.
  await page.getByRole('heading', { name: 'Reservations', exact: true }).waitFor();
  const row = page.locator(`tr[data-reservation-id="${block.id}"]`);
  await row.waitFor();
  assert.equal(await row.getAttribute('data-state'), 'BOOKED');
  assert.equal((await row.getByTestId('reservation-hours-left').innerText()).trim(), '6 of 6');
  assert.match(await row.innerText(), /\$9\.00/);
  assert.match(await row.getByTestId('reservation-escrow').innerText(), /released \$0\.00/);
  assert.match(await row.getByTestId('reservation-escrow').innerText(), /held \$9\.00/);
  assert.match(await row.innerText(), /booked/);
  await page.getByText('No listings.').waitFor();
  await checkA11y(page, 'billing reservations, a block booked');
  await shot(page, 'billing-reservations-01-booked');

  // List hours 2 to 4 of the block: first at a negative price (the API's
  // VALIDATION error at the price field, nothing listed), then at 2.50.
  const form = page.getByRole('form', { name: 'List hours for resale' });
  await form.getByLabel('Reservation').selectOption(block.id);
  const from = new Date(Date.parse(startsAt) + 2 * HOUR).toISOString();
  const until_ = new Date(Date.parse(startsAt) + 4 * HOUR).toISOString();
  await form.getByLabel('From (UTC)').fill(utcInput(from));
  await form.getByLabel('Until (UTC)').fill(utcInput(until_));
  await form.getByLabel(/^Price per GPU-hour/).fill('-1');
  await form.getByRole('button', { name: 'List hours' }).click();
  const priceError = form.locator('#resale-price-error');
  await priceError.waitFor();
  assert.match(await priceError.innerText(), /^pricePerGpuHour: .*VALIDATION$/s);
  assert.equal(await form.getByLabel(/^Price per GPU-hour/).getAttribute('aria-invalid'), 'true');
  const none = (await gql('{ myListings { id } }', {}, renter.token)).myListings;
  assert.deepEqual(none, [], 'nothing listed');
  await checkA11y(page, 'billing reservations, invalid listing');

  await form.getByLabel(/^Price per GPU-hour/).fill('2.50');
  await form.getByText(/A buyer pays \$5\.00; you get/).waitFor();
  await form.getByRole('button', { name: 'List hours' }).click();
  await form.getByRole('status').filter({ hasText: /^Listed 2 h .* for \$5\.00\.$/ }).waitFor();

  // The listing as the API has it, and on the page.
  const [listing] = (
    await gql('{ myListings { id reservationId startsAt endsAt hours amount state } }', {}, renter.token)
  ).myListings;
  assert.equal(listing.reservationId, block.id);
  assert.equal(Date.parse(listing.startsAt), Date.parse(from));
  assert.equal(Date.parse(listing.endsAt), Date.parse(until_));
  assert.equal(listing.hours, 2);
  assert.equal(Number(listing.amount), 5, '2.50 × 1 GPU × 2 h');
  assert.equal(listing.state, 'OPEN');
  const mine = page.getByRole('region', { name: 'Your listings', exact: true }).locator(`tr[data-listing-id="${listing.id}"]`);
  await mine.waitFor();
  assert.equal(await mine.getAttribute('data-state'), 'OPEN');
  assert.match(await mine.innerText(), /\$5\.00/);
  assert.match(await mine.innerText(), /open/);
  // On the market it is the renter's own: no Buy button for it.
  const market = (await gql('query($from: DateTime!) { resaleListings(filter: { from: $from }) { id } }', { from: new Date().toISOString() }, renter.token))
    .resaleListings;
  if (market.some((/** @type {any} */ l) => l.id === listing.id)) {
    const offered = page.getByRole('region', { name: 'Open listings', exact: true }).locator(`tr[data-listing-id="${listing.id}"]`);
    await offered.getByText('your listing').waitFor();
    assert.equal(await offered.getByRole('button').count(), 0);
  }
  await checkA11y(page, 'billing reservations, a listing open');
  await shot(page, 'billing-reservations-02-listed');

  // Phone width: the tables scroll inside their own regions.
  await page.setViewportSize({ width: 390, height: 844 });
  await mine.waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'billing reservations at 390 px');
  await page.setViewportSize({ width: 1100, height: 900 });

  // Withdraw it: withdrawn on the page and in the API; the block keeps its hours.
  await mine.getByRole('button', { name: /^Withdraw/ }).click();
  await until(async () => (await mine.getAttribute('data-state')) === 'WITHDRAWN', 'the listing withdrawn on the page');
  assert.match(await mine.innerText(), /withdrawn/);
  assert.equal(await mine.getByRole('button').count(), 0, 'nothing more to do with it');
  const after = (await gql('{ myListings { id state } }', {}, renter.token)).myListings;
  assert.deepEqual(after, [{ id: listing.id, state: 'WITHDRAWN' }]);
  const kept = (await gql('query($id: ID!) { reservation(id: $id) { hoursLeft sold { startsAt } } }', { id: block.id }, renter.token))
    .reservation;
  assert.equal(kept.hoursLeft, 6);
  assert.deepEqual(kept.sold, []);
  await checkA11y(page, 'billing reservations, listing withdrawn');

  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
});
