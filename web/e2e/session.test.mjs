// End-to-end: an expired session returns to the log-in form without losing
// what was typed. A host logs in at /portal and fills in the register-machine
// form; the test then replaces the stored JWT with an invalid one (as if it
// had expired or been revoked), the host submits, sees the log-in form with
// the session-expired message, logs in again, and finds the form as typed.
// Needs GPUMARKET_WEB_E2E_URL (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { BASE, PASSWORD, gql, browserForFile, shot, signUp, watchedPage } from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile(null);

test('an expired session returns to the log-in form and keeps the typed form', async () => {
  const t0 = Date.now();
  const host = await signUp('HOST', 'session-host');
  const models = (await gql('{ gpuModels { name vramGib } }')).gpuModels;
  const model = models[0];

  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors, requests } = await watchedPage(context);
  await page.goto(`${BASE}/portal`);
  await page.getByRole('tab', { name: 'Log in' }).click();
  await page.getByLabel('Email').fill(host.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();

  // The register-machine form, filled in but not yet sent.
  const select = page.getByLabel('GPU model');
  await page.waitForFunction(() => !(/** @type {HTMLSelectElement | null} */ (document.querySelector('#m-model'))?.disabled));
  await page.getByLabel('Machine name').fill('expiring-rig');
  await select.selectOption(model.name);
  await page.getByLabel('GPUs', { exact: true }).fill('3');
  await page.getByLabel('CPU cores').fill('24');
  await page.getByLabel('Country').fill('FR');
  const typed = {
    'Machine name': 'expiring-rig',
    'GPU model': model.name,
    GPUs: '3',
    'VRAM per GPU (GiB)': String(model.vramGib),
    'CPU cores': '24',
    Country: 'FR',
  };

  // The JWT expires (here: is replaced by one the API does not accept).
  const expired = await page.evaluate(() => {
    const old = sessionStorage.getItem('gpumarket.token') ?? '';
    const [h, , s] = old.split('.');
    const payload = btoa(JSON.stringify({ sub: 'expired', exp: 1 })).replace(/=+$/, '');
    const jwt = `${h}.${payload}.${s}`;
    sessionStorage.setItem('gpumarket.token', jwt);
    return jwt;
  });
  assert.ok(expired.split('.').length === 3);
  await page.getByRole('button', { name: 'Register machine' }).click();

  // Back at the log-in form, with the message; the token is gone.
  const message = page.getByTestId('session-expired');
  await message.waitFor();
  assert.match(await message.innerText(), /session has expired/);
  assert.equal(await page.evaluate(() => sessionStorage.getItem('gpumarket.token')), null, 'the token is dropped');
  assert.equal(await page.getByRole('tab', { name: 'Log in' }).getAttribute('aria-selected'), 'true', 'the log-in tab is open');
  assert.equal(await page.getByLabel('Email').inputValue(), host.email, 'the email is filled in');
  await checkA11y(page, 'session expired');
  await shot(page, 'session-01-expired');

  // Logging in again: the form is as it was typed.
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  await page.getByRole('heading', { name: 'Register a machine' }).waitFor();
  await page.waitForFunction(() => !(/** @type {HTMLSelectElement | null} */ (document.querySelector('#m-model'))?.disabled));
  for (const [label, value] of Object.entries(typed)) {
    assert.equal(await page.getByLabel(label, { exact: true }).inputValue(), value, `${label} is kept`);
  }
  assert.equal(await page.getByTestId('session-expired').count(), 0, 'the message is gone');
  await shot(page, 'session-02-restored');

  // And the registration goes through.
  await page.getByRole('button', { name: 'Register machine' }).click();
  await page.getByLabel('Agent install command').waitFor();
  await page.getByRole('button', { name: 'I have saved the token' }).click();

  // A price typed into the machine's row survives an expiry too.
  const row = page.getByRole('listitem').filter({ has: page.getByRole('heading', { name: 'expiring-rig' }) });
  await row.getByLabel(/Price per GPU-hour/).fill('0.42');
  await page.evaluate(() => sessionStorage.setItem('gpumarket.token', 'not.a.jwt'));
  await row.getByRole('button', { name: 'Save price' }).click();
  await page.getByTestId('session-expired').waitFor();
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in' }).click();
  assert.equal(await row.getByLabel(/Price per GPU-hour/).inputValue(), '0.42', 'the typed price is kept');
  await row.getByRole('button', { name: 'Save price' }).click();
  await row.getByText(/0\.42\d* USD per GPU-hour/).waitFor();
  await shot(page, 'session-03-price-kept');

  // Logging out drops the drafts.
  await page.getByRole('button', { name: 'Log out' }).click();
  assert.equal(
    await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith('gpumarket.draft.')).length),
    0,
    'no drafts after logging out',
  );

  const other = requests.filter((p) => !p.startsWith('/portal') && !p.startsWith('/billing') && p !== '/graphql');
  assert.deepEqual(other, [], 'requests outside the public API');
  assert.deepEqual(consoleErrors.filter((e) => !/401|Unauthorized/i.test(e)), [], 'console errors');
  await context.close();
  console.log(`# session test in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
});
