// End-to-end: a renter tops up its balance by card on /billing (issue #7).
// Chromium cannot reach js.stripe.com, so every js.stripe.com request is
// answered with a stand-in for Stripe.js (stripe-js-standin.js) that calls
// the Stripe test double (libs/stripe-double, started by web/e2e/run.sh) as
// Stripe.js calls Stripe. Everything after the click on "Pay" is the real
// path: the double marks the PaymentIntent succeeded and sends the signed
// `payment_intent.succeeded` webhook to the gateway, which forwards it to
// billing, which credits the ledger; the page polls until it shows the
// credit. Needs GPUMARKET_WEB_E2E_URL and GPUMARKET_E2E_STRIPE_URL (run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { BASE, PASSWORD, gql, browserForFile, shot, signUp, watchedPage } from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const STRIPE_URL = process.env.GPUMARKET_E2E_STRIPE_URL;
const STANDIN = new URL('./stripe-js-standin.js', import.meta.url);

const browser = browserForFile('top-up state');

/** A decimal string as an exact count of 10^-9 (no floats). @param {string} s */
function nanos(s) {
  const m = /^(-?)(\d+)(?:\.(\d{0,9}))?$/.exec(s);
  assert.ok(m, `a decimal: ${s}`);
  const n = BigInt(m[2]) * 1_000_000_000n + BigInt((m[3] ?? '').padEnd(9, '0'));
  return m[1] === '-' ? -n : n;
}

/** The renter's balance through the API. @param {string} token */
async function balance(token) {
  return /** @type {string} */ ((await gql('{ balance { amount } }', {}, token)).balance.amount);
}

/**
 * What the API itself answers to `createTopUp(amount)`: its first error.
 * @param {string} token @param {string} amount
 * @returns {Promise<{ message: string, code: string }>}
 */
async function apiRefusal(token, amount) {
  const res = await fetch(`${BASE}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: 'mutation($a: Decimal!) { createTopUp(amount: $a) { id } }', variables: { a: amount } }),
  });
  const body = await res.json();
  assert.ok(body.errors?.length, `createTopUp(${amount}) is refused: ${JSON.stringify(body)}`);
  return { message: body.errors[0].message, code: body.errors[0].extensions.code };
}

test('a renter tops up 25.00 by card and sees it credited', { skip: !STRIPE_URL && 'GPUMARKET_E2E_STRIPE_URL is not set' }, async () => {
  const t0 = Date.now();
  const stripeBase = /** @type {string} */ (STRIPE_URL);
  const renter = await signUp('RENTER', 'topup-renter');
  const terms = (await gql('{ platform { currency platformFeeRate stripePublishableKey } }')).platform;
  assert.match(terms.stripePublishableKey, /^pk_test_/, 'run.sh configures a publishable key');
  const before = await balance(renter.token);

  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const standin = readFileSync(STANDIN, 'utf8').replaceAll('__STRIPE_API_BASE__', stripeBase);
  /** @type {string[]} */
  const stripeJsRequests = [];
  await context.route('https://js.stripe.com/**', (route) => {
    stripeJsRequests.push(route.request().url());
    return route.fulfill({ status: 200, contentType: 'application/javascript; charset=utf-8', body: standin });
  });
  const { page, consoleErrors } = await watchedPage(context);
  /** @type {string[]} */
  const toStripe = [];
  page.on('request', (r) => {
    if (r.url().startsWith(stripeBase)) toStripe.push(`${r.method()} ${new URL(r.url()).pathname}`);
  });

  await page.goto(`${BASE}/billing`);
  await page.getByLabel('Email').fill(renter.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  const card = page.getByTestId('topup-card');
  await card.getByRole('heading', { name: 'Top up by card' }).waitFor();
  await card.getByText('No top-ups yet.').waitFor();
  await checkA11y(page, 'top-up form, no top-ups yet');

  // Bad amounts: the API's own VALIDATION message, at the field.
  const amount = card.getByLabel('Amount');
  for (const bad of ['0', '-5']) {
    const refusal = await apiRefusal(renter.token, bad);
    assert.equal(refusal.code, 'VALIDATION', `${bad}: ${refusal.message}`);
    await amount.fill(bad);
    await card.getByRole('button', { name: 'Continue to payment' }).click();
    const fieldError = card.locator('#topup-amount-error');
    await fieldError.waitFor();
    const shown = await fieldError.innerText();
    assert.ok(shown.includes(refusal.message), `the field shows the API's message for ${bad}: ${shown} / ${refusal.message}`);
    assert.ok(shown.includes('VALIDATION'), shown);
    assert.equal(await amount.getAttribute('aria-invalid'), 'true');
    assert.equal(await amount.getAttribute('aria-describedby'), 'topup-amount-hint topup-amount-error');
  }
  await checkA11y(page, 'top-up amount refused');
  await shot(page, 'topup-01-amount-refused');
  assert.deepEqual(stripeJsRequests, [], 'Stripe.js is not loaded before a top-up starts');
  assert.equal((await gql('{ topUps { id } }', {}, renter.token)).topUps.length, 0, 'refused amounts create nothing');

  // 25.00: a PaymentIntent at the double, the Payment Element mounted.
  await amount.fill('25.00');
  await card.getByRole('button', { name: 'Continue to payment' }).click();
  await card.locator('[data-stripe-standin="payment"]').waitFor();
  assert.equal(stripeJsRequests.length, 1, `Stripe.js loaded once: ${stripeJsRequests.join(', ')}`);
  const created = (await gql('{ topUps { id status amount paymentIntentId } }', {}, renter.token)).topUps;
  assert.equal(created.length, 1);
  assert.equal(created[0].status, 'requires_payment_method');
  assert.equal(nanos(created[0].amount), nanos('25'));
  assert.equal(await balance(renter.token), before, 'created is not paid');
  const pay = card.getByRole('button', { name: /^Pay \$25\.00$/ });
  await checkA11y(page, 'top-up payment element');
  await shot(page, 'topup-02-payment');

  // Paid: the double confirms and sends the webhook; the page waits for the credit.
  await pay.click();
  const status = card.getByTestId('topup-status');
  await status
    .filter({ hasText: 'succeeded' })
    .waitFor({ timeout: 30_000 })
    .catch(async (/** @type {Error} */ e) => {
      throw new Error(`${e.message}\nthe card shows: ${await card.innerText()}\nconsole errors: ${consoleErrors.join('; ')}`);
    });
  // The browser's one call to "Stripe": the confirm, as Stripe.js makes it.
  assert.deepEqual(toStripe, [`POST /v1/payment_intents/${created[0].paymentIntentId}/confirm`]);
  const after = await balance(renter.token);
  assert.equal(nanos(after) - nanos(before), nanos('25.00'), `the balance rose by exactly 25.00: ${before} → ${after}`);
  assert.equal(await card.getByTestId('topup-balance').innerText(), '$25.00');
  const row = card.getByTestId('topup-list').locator('tbody tr');
  assert.equal(await row.count(), 1);
  assert.match(await row.first().innerText(), /\$25\.00\s+succeeded/);
  // The balance card polls on its own and catches up.
  await page.getByTestId('billing-balance').filter({ hasText: '$25.00' }).waitFor({ timeout: 15_000 });
  const listed = (await gql('{ topUps { status succeededAtUtc } }', {}, renter.token)).topUps;
  assert.equal(listed[0].status, 'succeeded');
  assert.ok(listed[0].succeededAtUtc);
  await checkA11y(page, 'top-up succeeded');
  await shot(page, 'topup-03-succeeded');

  // At phone width: no sideways scrolling.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(200);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'top-up succeeded at 390 px');
  await shot(page, 'topup-03-succeeded-phone');

  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
  console.log(`# top-up test in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
