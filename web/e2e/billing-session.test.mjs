// End-to-end: the billing page's log-in form and an expired session. A
// VALIDATION error shows at the field it names, marked for assistive
// technology; a renter whose JWT stops being accepted while the dashboard
// polls is back at the billing log-in with the session-expired message and
// the email filled in, and after logging in again the dashboard is back
// (with the typed top-up amount as typed).
// Needs GPUMARKET_WEB_E2E_URL (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, PASSWORD, gql, grantCredit, browserForFile, operatorToken, shot, signUp, watchedPage } from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';
import { decimal, usd } from './billing-money.mjs';

const browser = browserForFile('billing session state');

/**
 * Answers the page's next log-in with `errors` instead of sending it. The
 * gateway's `login` has no shape checks (a login that cannot succeed answers
 * UNAUTHENTICATED like any other), so a VALIDATION error cannot be had from
 * it for real; this one is in the gateway's own format.
 * @param {import('playwright-core').Page} page @param {unknown[]} errors
 */
async function answerLoginWith(page, errors) {
  await page.route(
    '**/graphql',
    async (route) => {
      if (!/mutation BillingLogIn/.test(route.request().postData() ?? '')) return route.continue();
      await route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify({ data: null, errors }) });
    },
    { times: 1 },
  );
}

/**
 * The input labelled `label` shows `message` beside it: marked invalid and
 * described by it; the form's own error box does not repeat it.
 * @param {import('playwright-core').Page} page @param {string} label @param {string} id @param {RegExp} message
 */
async function errorAtField(page, label, id, message) {
  const input = page.getByLabel(label, { exact: true });
  const error = page.locator(`#${id}-error`);
  await error.waitFor();
  assert.match(await error.innerText(), message);
  assert.equal(await input.getAttribute('aria-invalid'), 'true', `${label} is marked invalid`);
  assert.ok((await input.getAttribute('aria-describedby'))?.split(' ').includes(`${id}-error`), `${label} is described by its error`);
  assert.equal(await page.locator('form .error').count(), 0, 'not repeated in the form error box');
}

test('billing log-in: a VALIDATION error shows at its field; an expired session comes back to the billing page', async () => {
  const t0 = Date.now();
  const renter = await signUp('RENTER', 'billing-session');
  const op = await operatorToken();
  await grantCredit(op, renter.tenantId, '2.50', `billing-session-${Date.now()}`);

  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors, requests } = await watchedPage(context);
  await page.goto(`${BASE}/billing`);
  await page.getByRole('heading', { name: 'Log in to see your billing' }).waitFor();

  // A VALIDATION error naming a field in its message (`<field>: <message>`,
  // as the gateway writes them) is shown at that field.
  await page.getByLabel('Email').fill('renter-at-example');
  await page.getByLabel('Password').fill(PASSWORD);
  await answerLoginWith(page, [{ message: 'email: must be an email address', extensions: { code: 'VALIDATION' } }]);
  await page.getByRole('button', { name: 'Log in' }).click();
  await errorAtField(page, 'Email', 'billing-email', /^email: must be an email address VALIDATION$/);
  assert.equal(await page.getByLabel('Password').getAttribute('aria-invalid'), null, 'the password is not marked');
  await checkA11y(page, 'billing login, VALIDATION at the email');
  await shot(page, 'billing-session-01-validation');

  // And one naming it in `extensions.field`.
  await answerLoginWith(page, [{ message: 'too long', extensions: { code: 'VALIDATION', field: 'password' } }]);
  await page.getByRole('button', { name: 'Log in' }).click();
  await errorAtField(page, 'Password', 'billing-password', /^too long VALIDATION$/);
  assert.equal(await page.getByLabel('Email').getAttribute('aria-invalid'), null, 'the email is no longer marked');
  await checkA11y(page, 'billing login, VALIDATION at the password');

  // A VALIDATION error naming no field of the form is in the form's error box.
  await answerLoginWith(page, [{ message: 'tenantId: not a tenant', extensions: { code: 'VALIDATION' } }]);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.locator('form .error').filter({ hasText: 'tenantId: not a tenant VALIDATION' }).waitFor();
  assert.equal(await page.locator('.field-error').count(), 0, 'no field error');

  // The real log-in, from the keyboard.
  await page.getByLabel('Email').fill(renter.email);
  await page.getByLabel('Password').focus();
  await page.keyboard.press('Enter');
  const balance = page.getByTestId('billing-balance');
  await balance.waitFor();
  assert.equal(await balance.innerText(), usd('2.50'));
  await page.getByTestId('billing-history').getByTestId('billing-history-kind').filter({ hasText: /^credit/ }).first().waitFor();

  // The top-up amount is the dashboard's one typed input (run.sh configures
  // card top-ups: a Stripe double and a publishable key).
  const topUpAmount = page.locator('#topup-amount');
  await topUpAmount.waitFor();
  await topUpAmount.fill('12.34');

  // The JWT expires (here: is replaced by one the API does not accept); the
  // dashboard's next poll finds out.
  await page.evaluate(() => {
    const [h, , s] = (sessionStorage.getItem('gpumarket.token') ?? '').split('.');
    const payload = btoa(JSON.stringify({ sub: 'expired', exp: 1 })).replace(/=+$/, '');
    sessionStorage.setItem('gpumarket.token', `${h}.${payload}.${s}`);
  });
  const message = page.getByTestId('session-expired');
  await message.waitFor({ timeout: 15_000 });
  assert.match(await message.innerText(), /session has expired/);
  await page.getByRole('heading', { name: 'Log in to see your billing' }).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('gpumarket.token')), null, 'the token is dropped');
  assert.equal(await page.getByLabel('Email').inputValue(), renter.email, 'the email is filled in');
  assert.equal(await page.getByLabel('Password').inputValue(), '', 'the password is not kept');
  assert.equal(await page.getByRole('button', { name: 'Log out' }).count(), 0, 'signed out');
  await checkA11y(page, 'billing login, session expired');
  await shot(page, 'billing-session-02-expired');

  // At phone width the expired log-in does not scroll sideways.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(200);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'billing login, session expired, 390 px');
  await shot(page, 'billing-session-03-expired-phone');
  await page.setViewportSize({ width: 1100, height: 900 });

  // Logging in again: the billing page is back, with the API's balance.
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await balance.waitFor();
  const now = (await gql('{ balance { amount } }', {}, (await gql(
    'mutation($e: String!, $p: String!) { login(email: $e, password: $p) { token } }',
    { e: renter.email, p: PASSWORD },
  )).login.token)).balance.amount;
  assert.equal(decimal(now), decimal('2.50'));
  assert.equal(await balance.innerText(), usd(now));
  await page.getByRole('heading', { name: 'Balance history' }).waitFor();
  await page.getByTestId('billing-history').getByTestId('billing-history-kind').filter({ hasText: /^credit/ }).first().waitFor();
  assert.equal(await page.getByTestId('session-expired').count(), 0, 'the message is gone');
  assert.equal(await page.getByRole('button', { name: 'Log out' }).count(), 1, 'signed in');
  assert.equal(await topUpAmount.inputValue(), '12.34', 'the typed top-up amount is kept');
  await checkA11y(page, 'billing dashboard after logging in again');
  await shot(page, 'billing-session-04-back');

  const other = requests.filter((p) => !p.startsWith('/portal') && !p.startsWith('/billing') && p !== '/graphql');
  assert.deepEqual(other, [], 'requests outside the public API');
  assert.deepEqual(consoleErrors.filter((e) => !/401|Unauthorized/i.test(e)), [], 'console errors');
  await context.close();
  console.log(`# billing session test in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
