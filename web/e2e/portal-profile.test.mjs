// End-to-end: the host portal's "Profile and payouts" page and statements.
// 1. A new host signs up, sends an invalid host profile and sees the API's
//    VALIDATION message at the field; its typed profile survives an expired
//    session; the valid profile is saved and shown after a reload. Setting up
//    payouts with the Stripe test double (which web/e2e/run.sh starts): the
//    account is created and the page shows its state as the API reads it and
//    what is left to do; "Continue onboarding at Stripe" goes through the
//    hosted onboarding (the double's stand-in) and back, and the account is
//    then active.
// 2. A host with real earnings (a renter rents its machine through the API)
//    opens the current period's statement preview and then, after the demo
//    operator finalizes the period (`runStatements`), the statement: the sum
//    of its lines equals the statement's earnings and the host's earnings
//    from the API, to the last decimal.
// Each new state is checked with axe and at phone width (390 px).
// Needs GPUMARKET_WEB_E2E_URL; the second test GPUMARKET_E2E_AGENT_BIN (web/e2e/run.sh).
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
  rentOneGpu,
  shot,
  signUp,
  startAgent,
  until,
  watchedPage,
} from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile('page state');

/**
 * A GraphQL request whose errors are the point: the raw answer.
 * @param {string} query @param {Record<string, unknown>} variables @param {string} token
 * @returns {Promise<{ data: any, errors?: { message: string, extensions?: { code?: string, fieldErrors?: { field: string, message: string }[] } }[] }>}
 */
async function rawGql(query, variables, token) {
  const res = await fetch(`${BASE}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  return res.json();
}

/** @param {import('playwright-core').Page} page @param {string} state */
async function fitsPhone(page, state) {
  const size = page.viewportSize();
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(150);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px on the ${state} (${overflow} px too wide)`);
  await checkA11y(page, `${state} at phone width`);
  return async () => {
    if (size) await page.setViewportSize(size);
  };
}

/** A decimal string as an exact BigInt scaled by 10^12 (the API gives at most 9 decimals). @param {string} s */
function dec(s) {
  const m = /^(-)?(\d+)(?:\.(\d+))?$/.exec(s.trim());
  assert.ok(m, `a decimal: ${s}`);
  assert.ok((m[3] ?? '').length <= 12, `at most 12 decimals: ${s}`);
  const n = BigInt(m[2]) * 10n ** 12n + BigInt((m[3] ?? '').padEnd(12, '0'));
  return m[1] ? -n : n;
}

/**
 * `value` rounded half-even to the currency's minor units and formatted as
 * the portal formats money (en-US).
 * @param {string} value @param {string} currency
 */
function halfEven(value, currency) {
  const f = new Intl.NumberFormat('en-US', { style: 'currency', currency });
  const digits = f.resolvedOptions().maximumFractionDigits ?? 2;
  const n = dec(value);
  const unit = 10n ** BigInt(12 - digits);
  const neg = n < 0n;
  const a = neg ? -n : n;
  let q = a / unit;
  const r2 = (a % unit) * 2n;
  if (r2 > unit || (r2 === unit && q % 2n === 1n)) q += 1n;
  const s = q.toString().padStart(digits + 1, '0');
  const fixed = `${neg ? '-' : ''}${s.slice(0, s.length - digits)}${digits > 0 ? `.${s.slice(-digits)}` : ''}`;
  return /** @type {(v: string) => string} */ (/** @type {unknown} */ (f.format))(fixed);
}

/** `value` with exactly 9 decimals, as the page shows exact amounts. @param {string} value @param {string} currency */
function exact9(value, currency) {
  const n = dec(value);
  const neg = n < 0n;
  const a = (neg ? -n : n) / 1000n;
  const s = a.toString().padStart(10, '0');
  return `${neg ? '-' : ''}${s.slice(0, -9)}.${s.slice(-9)} ${currency}`;
}

test('a new host saves its profile (an invalid country first) and sets up payouts', async () => {
  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors, requests } = await watchedPage(context);

  // Sign up in the portal, then go to the profile page.
  await page.goto(`${BASE}/portal`);
  const email = `profile-host-${Date.now()}@e2e.example`;
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByLabel('Organisation name').fill('E2E Profile Hosting');
  await page.getByRole('button', { name: 'Sign up', exact: true }).click();
  await page.getByRole('heading', { name: 'My machines' }).waitFor();
  const pages = page.getByRole('navigation', { name: 'Host portal pages' });
  assert.equal(await pages.getByRole('link', { name: 'Machines and earnings' }).getAttribute('aria-current'), 'page');
  await pages.getByRole('link', { name: 'Profile and payouts' }).click();
  await page.waitForURL(`${BASE}/portal/profile`);
  const card = page.getByRole('region', { name: 'Host profile' });
  await card.getByTestId('verification').waitFor();
  assert.equal(await card.getByTestId('verification').innerText(), 'Unverified');
  assert.equal(await card.getByTestId('verification-reason').innerText(), 'none given');
  await card.getByTestId('profile-missing').waitFor();
  const jwt = await page.evaluate(() => sessionStorage.getItem('gpumarket.token'));
  assert.ok(jwt);
  await shot(page, '20-host-profile-empty');
  await checkA11y(page, 'host profile, empty');

  // The form is reachable from the keyboard, in order.
  await card.getByLabel('Legal name').focus();
  const focused = () => page.evaluate(() => document.activeElement?.id || document.activeElement?.textContent || '');
  for (const next of ['profile-country', 'profile-currency', 'Save host profile']) {
    await page.keyboard.press('Tab');
    assert.equal(await focused(), next);
  }

  // Three wrong fields: one answer from the API names them all
  // (extensions.fieldErrors), and each input shows its own message.
  await card.getByLabel('Legal name').fill('   ');
  await card.getByLabel('Country').fill('Germany');
  await card.getByLabel('Payout currency').fill('euro');
  await card.getByRole('button', { name: 'Save host profile' }).click();
  await page.locator('#profile-currency-error').waitFor();
  const allWrong = await rawGql(
    'mutation($input: HostProfileInput!) { updateHostProfile(input: $input) { updatedAtUtc } }',
    { input: { legalName: '   ', country: 'Germany', payoutCurrency: 'euro' } },
    jwt,
  );
  const fieldErrors = allWrong.errors?.[0]?.extensions?.fieldErrors ?? [];
  assert.deepEqual(
    fieldErrors.map((e) => e.field),
    ['legalName', 'country', 'payoutCurrency'],
  );
  const inputs = ['profile-legal-name', 'profile-country', 'profile-currency'];
  for (const [i, id] of inputs.entries()) {
    const e = fieldErrors[i];
    assert.equal(await page.locator(`#${id}-error`).innerText(), `${e.field}: ${e.message} VALIDATION`);
    assert.equal(await page.locator(`#${id}`).getAttribute('aria-invalid'), 'true');
  }
  await shot(page, '21-host-profile-all-invalid');
  await checkA11y(page, 'host profile with three invalid fields');

  // An invalid country: the API's VALIDATION message, at the country field.
  await card.getByLabel('Legal name').fill('E2E Hosting GmbH');
  await card.getByLabel('Country').fill('Germany');
  await card.getByLabel('Payout currency').fill('eur');
  await card.getByRole('button', { name: 'Save host profile' }).click();
  const countryError = page.locator('#profile-country-error');
  await countryError.waitFor();
  const refused = await rawGql(
    'mutation($input: HostProfileInput!) { updateHostProfile(input: $input) { updatedAtUtc } }',
    { input: { legalName: 'E2E Hosting GmbH', country: 'GERMANY', payoutCurrency: 'EUR' } },
    jwt,
  );
  const apiError = refused.errors?.[0];
  assert.ok(apiError, 'the API refuses the country too');
  assert.equal(apiError.extensions?.code, 'VALIDATION');
  assert.match(apiError.message, /^country: /);
  assert.equal(await countryError.innerText(), `${apiError.message} VALIDATION`);
  assert.equal(await card.getByLabel('Country').getAttribute('aria-invalid'), 'true');
  assert.match((await card.getByLabel('Country').getAttribute('aria-describedby')) ?? '', /profile-country-error/);
  assert.equal(await card.getByLabel('Legal name').getAttribute('aria-invalid'), null, 'only the field named');
  await shot(page, '21-host-profile-invalid');
  await checkA11y(page, 'host profile with a validation error');

  // The session expires as the corrected profile is sent: the log-in form,
  // and after logging in again the typed profile is still there.
  await card.getByLabel('Country').fill('de');
  await page.evaluate(() => {
    sessionStorage.setItem('gpumarket.token', 'not-a-valid-jwt');
    /** @type {HTMLInputElement} */ (document.querySelector('#profile-legal-name')).form?.requestSubmit();
  });
  await page.getByTestId('session-expired').waitFor();
  assert.equal(await page.getByLabel('Email').inputValue(), email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
  await card.getByTestId('verification').waitFor();
  assert.equal(await card.getByLabel('Legal name').inputValue(), 'E2E Hosting GmbH');
  assert.equal(await card.getByLabel('Country').inputValue(), 'de');
  assert.equal(await card.getByLabel('Payout currency').inputValue(), 'eur');

  // Saved: the API has it, and a reload shows it from the API.
  await card.getByRole('button', { name: 'Save host profile' }).click();
  await card.getByTestId('profile-saved').getByText(/Profile saved/).waitFor();
  const token2 = await page.evaluate(() => sessionStorage.getItem('gpumarket.token'));
  const saved = (await gql('{ hostProfile { legalName country payoutCurrency verification } }', {}, token2 ?? undefined))
    .hostProfile;
  assert.deepEqual(saved, {
    legalName: 'E2E Hosting GmbH',
    country: 'DE',
    payoutCurrency: 'EUR',
    verification: 'UNVERIFIED',
  });
  await page.reload();
  await card.getByTestId('verification').waitFor();
  assert.equal(await card.getByLabel('Legal name').inputValue(), 'E2E Hosting GmbH');
  assert.equal(await card.getByLabel('Country').inputValue(), 'DE');
  assert.equal(await card.getByLabel('Payout currency').inputValue(), 'EUR');
  assert.equal(await card.getByTestId('profile-missing').count(), 0, 'nothing missing');
  const drafts = await page.evaluate(() =>
    Object.keys(sessionStorage).filter((k) => k.startsWith('gpumarket.draft.profile.')),
  );
  assert.deepEqual(drafts, [], 'no draft left once saved');
  await shot(page, '22-host-profile-saved');
  await checkA11y(page, 'host profile saved');

  // Payouts: no account yet; the form is filled in from the profile and the session.
  const payout = page.getByRole('region', { name: 'Payout account' });
  await payout.getByTestId('payout-none').waitFor();
  assert.equal(await payout.getByLabel('Account country').inputValue(), 'DE');
  assert.equal(await payout.getByLabel('Email for Stripe (optional)').inputValue(), email);
  await checkA11y(page, 'payout account, none yet');

  // An invalid country is refused at its field.
  await payout.getByLabel('Account country').fill('Deutschland');
  await payout.getByRole('button', { name: 'Create payout account' }).click();
  const payoutCountryError = page.locator('#payout-country-error');
  await payoutCountryError.waitFor();
  assert.match(await payoutCountryError.innerText(), /^country: .* VALIDATION$/);

  await payout.getByLabel('Account country').fill('DE');
  await payout.getByRole('button', { name: 'Create payout account' }).click();
  // With a Stripe (the test double web/e2e/run.sh starts): the account,
  // its state as the API reads it from Stripe, and what is left to do.
  await payout.getByTestId('payout-account').waitFor();
  const account = (
    await gql(
      '{ payoutAccount { stripeAccountId country email transfersStatus payoutsEnabled detailsSubmitted } }',
      {},
      token2 ?? undefined,
    )
  ).payoutAccount;
  assert.ok(account, 'the API has the account');
  assert.deepEqual([account.country, account.email], ['DE', email]);
  const expectAccount = async () => {
    assert.equal(await payout.getByTestId('payout-stripe-id').innerText(), account.stripeAccountId);
    assert.equal(await payout.getByTestId('payout-country').innerText(), 'DE');
    assert.equal(await payout.getByTestId('payout-email').innerText(), email);
    assert.match(await payout.getByTestId('payout-transfers').innerText(), new RegExp(`^${account.transfersStatus}`, 'i'));
    assert.equal(await payout.getByTestId('payout-details').innerText(), account.detailsSubmitted ? 'Yes' : 'No');
    assert.equal(await payout.getByTestId('payout-enabled').innerText(), account.payoutsEnabled ? 'Enabled' : 'Not enabled yet');
    const todo = payout.getByTestId('payout-todo');
    const steps = [!account.detailsSubmitted, account.transfersStatus !== 'active', !account.payoutsEnabled].filter(Boolean);
    assert.equal(await todo.locator('li').count(), steps.length, 'a step for each thing Stripe still waits for');
    if (!account.detailsSubmitted) await todo.getByText(/Submit your identity and bank details/).waitFor();
  };
  await expectAccount();
  console.log(
    `# payout account ${account.stripeAccountId}: transfers ${account.transfersStatus}, payouts enabled ${account.payoutsEnabled}, details submitted ${account.detailsSubmitted}`,
  );
  await page.reload();
  await payout.getByTestId('payout-account').waitFor();
  await expectAccount();
  await shot(page, '23-payout-account');
  await checkA11y(page, 'payout account created');

  // Onboarding at Stripe: the button opens the hosted page (the double's
  // stand-in completes it at once), which sends the browser back here; the
  // account is then read from Stripe again, with nothing left to do.
  await payout.getByRole('button', { name: 'Continue onboarding at Stripe' }).click();
  await page.waitForURL(/\/portal\/profile\?payouts=done$/);
  await payout.getByTestId('payout-account').waitFor();
  assert.equal(await payout.getByTestId('payout-details').innerText(), 'Yes');
  assert.equal(await payout.getByTestId('payout-enabled').innerText(), 'Enabled');
  assert.match(await payout.getByTestId('payout-transfers').innerText(), /^Active/);
  await payout.getByTestId('payout-todo').getByText(/^Nothing/).waitFor();
  assert.equal(await payout.getByRole('button', { name: 'Continue onboarding at Stripe' }).count(), 0);
  assert.deepEqual(
    (await gql('{ payoutAccount { transfersStatus payoutsEnabled detailsSubmitted } }', {}, token2 ?? undefined))
      .payoutAccount,
    { transfersStatus: 'active', payoutsEnabled: true, detailsSubmitted: true },
  );
  await shot(page, '23-payout-account-onboarded');
  await checkA11y(page, 'payout account onboarded');
  const restore = await fitsPhone(page, 'profile and payouts page');
  await shot(page, '24-phone-profile-and-payouts');
  await restore();

  // Back to the machines by the page's own link.
  await pages.getByRole('link', { name: 'Machines and earnings' }).click();
  await page.getByRole('heading', { name: 'My machines' }).waitFor();
  assert.equal(new URL(page.url()).pathname, '/portal');

  // `/onboarding/…` is Stripe's hosted onboarding (the double's stand-in):
  // the browser is sent there and back, it is not an API the page calls.
  const other = requests.filter(
    (p) => !p.startsWith('/portal') && !p.startsWith('/billing') && p !== '/graphql' && !p.startsWith('/onboarding/'),
  );
  assert.deepEqual(other, [], 'requests outside the public API');
  // The expired session's 401 is expected; nothing else may be logged.
  assert.deepEqual(consoleErrors.filter((e) => !/401|Unauthorized/i.test(e)), [], 'console errors');
  await context.close();
});

const STATEMENT = `id number state periodStartUtc periodEndUtc currency seconds fee earnings openingBalance closingBalance payouts adjustments
  lines { machineId gpuModel meterKind seconds amount }`;

test('a host opens the current period and a finalized statement: the lines add up to its earnings', { skip: !AGENT_BIN && 'GPUMARKET_E2E_AGENT_BIN is not set' }, async () => {
  const t0 = Date.now();
  const host = await signUp('HOST', 'statement-host');
  const models = (await gql('{ gpuModels { name vramGib } }')).gpuModels;
  const model = models[0];
  const { machineId, agentToken } = await listedMachine(host.token, model, {
    name: 'statement-rig',
    country: 'NL',
    idempotencyKey: `statement-${Date.now()}`,
    // A high price, so a few seconds earn whole cents.
    pricePerGpuHour: '300',
  });
  startAgent(['agent', '--machine-id', machineId, '--token', agentToken], model.name, model.vramGib);
  const renter = await signUp('RENTER', 'statement-renter');
  const op = await operatorToken();
  await grantCredit(op, renter.tenantId, '50', `statement-credit-${Date.now()}`);
  const ordered = await rentOneGpu(renter.token, machineId, `statement-order-${Date.now()}`, 300);
  await new Promise((r) => setTimeout(r, 2500));
  await gql('mutation($id: ID!) { stopInstance(id: $id) { id } }', { id: ordered.id }, renter.token);
  // The usage is posted in parts: wait until the total holds still for a while.
  /** @type {string[]} */
  const seen = [];
  const total = await until(async () => {
    const t = (await gql('{ hostEarnings { total postings { postedAtUtc } } }', {}, host.token)).hostEarnings;
    seen.push(t.postings.length > 0 ? t.total : '');
    const last = seen.slice(-4);
    return last.length === 4 && last[0] !== '' && last.every((x) => x === last[0]) ? last[0] : null;
  }, 'the host earnings posted and settled', 45_000, 700);
  assert.ok(dec(total) > 0n, `earnings: ${total}`);
  console.log(`# earnings ${total} ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors } = await watchedPage(context);
  await page.goto(`${BASE}/portal`);
  await page.getByRole('tab', { name: 'Log in' }).click();
  await page.getByLabel('Email').fill(host.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
  const earnings = page.getByRole('region', { name: 'Earnings', exact: true });
  await earnings.getByTestId('statements-empty').waitFor();

  /**
   * The open statement's lines and totals as the page shows them, checked
   * against the API's statement.
   * @param {string} title @param {any} api the statement from the API
   */
  const checkStatement = async (title, api) => {
    const detail = earnings.getByRole('region', { name: title });
    await detail.getByTestId('statement-lines').waitFor();
    assert.equal(
      await page.evaluate(() => document.activeElement?.id),
      'statement-title',
      'focus moves to the opened statement',
    );
    const lines = detail.getByTestId('statement-line');
    assert.equal(await lines.count(), api.lines.length, 'a row per line');
    await lines.filter({ hasText: 'statement-rig' }).filter({ hasText: model.name }).first().waitFor();
    const amounts = await detail.getByTestId('line-amount').locator('data').evaluateAll((ds) =>
      ds.map((d) => /** @type {HTMLDataElement} */ (d).value),
    );
    const sum = amounts.reduce((s, a) => s + dec(a), 0n);
    assert.equal(sum, dec(api.earnings), `the lines (${amounts.join(' + ')}) add up to the statement's earnings ${api.earnings}`);
    const shownTotal = await detail.getByTestId('total-amount').locator('data').getAttribute('value');
    assert.equal(dec(shownTotal ?? ''), dec(api.earnings), 'the total row is the statement earnings');
    assert.equal(
      await detail.getByTestId('statement-earnings').locator('data').getAttribute('value'),
      api.earnings,
      'the earnings figure',
    );
    assert.equal(await detail.getByTestId('statement-closing').locator('data').getAttribute('value'), api.closingBalance);
    assert.equal(await detail.getByTestId('statement-opening').locator('data').getAttribute('value'), api.openingBalance);
    // Rounded half-even to cents, from the exact amount; or every decimal the API gives.
    assert.equal(await detail.getByTestId('total-amount').innerText(), halfEven(api.earnings, api.currency));
    assert.equal(await detail.getByTestId('statement-closing').innerText(), halfEven(api.closingBalance, api.currency));
    assert.equal(await detail.getByTestId('total-fee').innerText(), halfEven(api.fee, api.currency));
    await detail.getByLabel(/Show exact amounts/).check();
    assert.equal(await detail.getByTestId('total-amount').innerText(), exact9(api.earnings, api.currency));
    await detail.getByLabel(/Show exact amounts/).uncheck();
    return sum;
  };

  // The current period so far: not stored, with the usage on its lines.
  await earnings.getByRole('button', { name: 'Current period so far' }).click();
  const preview = (await gql(`{ statementPreview { ${STATEMENT} } }`, {}, host.token)).statementPreview;
  assert.equal(preview.state, 'DRAFT');
  const previewSum = await checkStatement('Current period so far (draft)', preview);
  assert.equal(previewSum, dec(total), "the preview's lines add up to the host's earnings");
  await shot(page, '25-statement-preview');
  await checkA11y(page, 'current period statement preview');

  // The demo operator finalizes the period up to now for this host.
  const run = (
    await gql(
      `mutation($e: DateTime, $h: ID) { runStatements(periodEndUtc: $e, hostTenantId: $h) { statements { id number } } }`,
      { e: new Date().toISOString(), h: host.tenantId },
      op,
    )
  ).runStatements;
  assert.equal(run.statements.length, 1, 'one statement finalized');
  const id = run.statements[0].id;
  const statement = (await gql(`query($id: ID!) { statement(id: $id) { ${STATEMENT} } }`, { id }, host.token)).statement;
  const hostTotal = (await gql('{ hostEarnings { total } }', {}, host.token)).hostEarnings.total;

  await page.reload();
  const opener = earnings.getByRole('button', { name: new RegExp(`^No\\. ${statement.number}, `) });
  await opener.click();
  assert.equal(await opener.getAttribute('aria-expanded'), 'true');
  const sum = await checkStatement(`Statement No. ${statement.number}`, statement);
  assert.equal(sum, dec(hostTotal), `the statement's lines add up to the host's earnings from the API (${hostTotal})`);
  assert.equal(dec(statement.closingBalance), dec(hostTotal), 'closing balance: the earnings account');
  await shot(page, '26-statement-finalized');
  await checkA11y(page, 'finalized statement');
  const restore = await fitsPhone(page, 'finalized statement');
  await page.getByRole('heading', { name: `Statement No. ${statement.number}` }).scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, '27-phone-statement.png') });
  await restore();

  // The current period after it: nothing yet, and the page says so.
  await earnings.getByRole('button', { name: 'Current period so far' }).click();
  const after = earnings.getByRole('region', { name: 'Current period so far (draft)' });
  await after.getByTestId('statement-lines-empty').waitFor();
  assert.equal(
    await after.getByTestId('statement-opening').locator('data').getAttribute('value'),
    (await gql(`{ statementPreview { openingBalance } }`, {}, host.token)).statementPreview.openingBalance,
  );
  await checkA11y(page, 'current period statement, empty');
  await after.getByRole('button', { name: 'Close statement' }).click();
  assert.equal(await page.evaluate(() => document.activeElement?.id), 'statements-title', 'focus returns to the list');

  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
});
