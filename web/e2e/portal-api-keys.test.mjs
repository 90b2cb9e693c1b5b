// End-to-end: the portal's "API keys" page (/portal/api-keys). A renter
// (API keys are every user's, not only hosts') logs in, creates a key with a
// name and two scopes, sees its secret once, and the key works against the
// API; the list shows its name, prefix and scopes, and its last use once it
// was used; revoking asks for confirmation (cancel keeps it), and after
// "Yes, revoke" the key's very next request is UNAUTHENTICATED and the list
// no longer shows it unless revoked keys are asked for. Each state is
// checked with axe and at phone width (390 px).
// Needs GPUMARKET_WEB_E2E_URL (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, PASSWORD, browserForFile, gql, shot, signUp, until, watchedPage } from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile('API keys page state');

/**
 * The first error code of a request made with `token`, or "OK".
 * @param {string} token @returns {Promise<string>}
 */
async function codeWith(token) {
  const res = await fetch(`${BASE}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query: '{ me { email scopes } }' }),
  });
  const body = await res.json();
  return body.errors?.[0]?.extensions?.code ?? 'OK';
}

/** @param {import('playwright-core').Page} page @param {string} state */
async function fitsPhone(page, state) {
  const size = page.viewportSize();
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForTimeout(150);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px on the ${state} (${overflow} px too wide)`);
  await checkA11y(page, `${state} at phone width`);
  if (size) await page.setViewportSize(size);
}

test('a user creates an API key, sees its secret once, and revokes it with effect on the next request', async () => {
  const renter = await signUp('RENTER', 'keys-renter');
  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors, requests } = await watchedPage(context);
  await page.goto(`${BASE}/portal/api-keys`);
  await page.getByRole('tab', { name: 'Log in' }).click();
  await page.getByLabel('Email').fill(renter.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();

  // The page, reached by its own path and marked in the portal's navigation.
  await page.getByRole('heading', { name: 'Create an API key' }).waitFor();
  assert.equal(await page.getByRole('link', { name: 'API keys' }).getAttribute('aria-current'), 'page');
  await page.getByText('No API keys yet.').waitFor();
  await checkA11y(page, 'API keys page, empty');
  await shot(page, 'api-keys-01-empty');

  // A blank name: the API's VALIDATION message at the name field.
  await page.getByRole('button', { name: 'Create API key' }).click();
  const nameError = page.locator('#key-name-error');
  await nameError.waitFor();
  assert.match(await nameError.innerText(), /VALIDATION/);
  assert.equal(await page.getByLabel('Name').getAttribute('aria-invalid'), 'true');
  await checkA11y(page, 'API key form with an invalid name');

  // Created with a name and two scopes: the secret is shown once.
  await page.getByLabel('Name').fill('ci pipeline');
  await page.getByLabel(/^Billing/).check();
  await page.getByRole('button', { name: 'Create API key' }).click();
  const secretInput = page.getByLabel('API key', { exact: true });
  await secretInput.waitFor();
  const secret = await secretInput.inputValue();
  assert.match(secret, /^gpm_[0-9a-f]{8}_[0-9a-f]{64}$/);
  await checkA11y(page, 'new API key secret');
  await fitsPhone(page, 'new API key secret');
  await shot(page, 'api-keys-02-secret');
  assert.equal(await codeWith(secret), 'OK', 'the new key works');
  const me = await gql('{ me { scopes } }', {}, secret);
  assert.deepEqual([...me.me.scopes].sort(), ['BILLING', 'READ']);

  // Dismissed: the secret is gone from the page for good.
  await page.getByRole('button', { name: 'I have saved the key' }).click();
  await page.getByRole('heading', { name: 'Create an API key' }).waitFor();
  assert.equal(await page.content().then((html) => html.includes(secret.slice(13))), false, 'the secret is not in the page');

  // Listed with its name, prefix, scopes and (after a reload) its last use.
  const prefix = secret.slice(4, 12);
  await page.reload();
  const row = page.getByRole('row', { name: /ci pipeline/ });
  await row.waitFor();
  const text = await row.innerText();
  assert.ok(text.includes(`gpm_${prefix}_`), `the prefix is shown: ${text}`);
  assert.match(text, /read, billing|billing, read/);
  assert.ok(!/never/.test(text), `the key was used, so its last use is shown: ${text}`);
  assert.equal(await page.getByText(secret.slice(13)).count(), 0);
  await checkA11y(page, 'API keys list');
  await fitsPhone(page, 'API keys list');
  await shot(page, 'api-keys-03-listed');

  // Revoking asks first; cancelling keeps the key working.
  await page.getByRole('button', { name: 'Revoke ci pipeline' }).click();
  const confirm = page.getByRole('button', { name: 'Yes, revoke ci pipeline' });
  await confirm.waitFor();
  assert.equal(await page.evaluate(() => document.activeElement?.textContent), 'Yes, revoke ci pipeline', 'focus moves to the confirmation');
  await checkA11y(page, 'revocation confirmation');
  await shot(page, 'api-keys-04-confirm');
  await page.getByRole('button', { name: 'Cancel' }).click();
  assert.equal(await codeWith(secret), 'OK', 'cancelled: the key still works');

  // Revoked: the very next request with the key is refused.
  await page.getByRole('button', { name: 'Revoke ci pipeline' }).click();
  await page.getByRole('button', { name: 'Yes, revoke ci pipeline' }).click();
  await until(async () => (await page.getByText('No API keys yet.').count()) > 0, 'the revoked key to leave the list', 10_000, 100);
  assert.equal(await codeWith(secret), 'UNAUTHENTICATED', 'the revoked key is refused at once');

  // Still there for the record, marked revoked.
  await page.getByLabel('Show revoked keys').check();
  const revoked = page.getByRole('row', { name: /ci pipeline/ });
  await revoked.waitFor();
  assert.match(await revoked.innerText(), /Revoked/);
  assert.equal(await page.getByRole('button', { name: 'Revoke ci pipeline' }).count(), 0, 'a revoked key has no revoke button');
  await checkA11y(page, 'API keys list with revoked keys');
  await shot(page, 'api-keys-05-revoked');

  assert.deepEqual(consoleErrors, [], 'no console errors');
  const foreign = requests.filter((p) => !p.startsWith('/portal') && p !== '/graphql');
  assert.deepEqual(foreign, [], 'the page requests only its own assets and the API');
  await context.close();
});
