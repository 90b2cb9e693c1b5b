// End-to-end: a new host onboards in the portal and lists a machine.
// Drives Debian's Chromium with playwright-core against a running stack
// whose gateway is GPUMARKET_WEB_E2E_URL (web/e2e/run.sh starts one).
// Screenshots of each page go to web/e2e/screenshots/.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
// When GPUMARKET_E2E_AGENT_BIN is set (web/e2e/run.sh sets it), the test runs
// the install command it was shown, with simulated GPUs, and waits for the
// machine to be online.
import { AGENT_BIN, BASE, SHOTS, TIMEOUT, gql, browserForFile, pageMoney, shot, startAgent, watchedPage } from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile('page state');

test('a new host signs up, registers a machine, sees its token once, prices and lists it', async () => {
  const context = await browser().newContext({
    viewport: { width: 1100, height: 900 },
    permissions: ['clipboard-read', 'clipboard-write'],
  });
  const { page, consoleErrors, requests } = await watchedPage(context, { httpErrors: true });

  // Sign up: a too-short password is refused with the error beside the field.
  await page.goto(`${BASE}/portal`);
  await page.getByRole('heading', { name: 'Create a host account' }).waitFor();
  await shot(page, '01-sign-up');
  await checkA11y(page, 'sign-up form');
  const email = `host-${Date.now()}@e2e.example`;
  await page.getByLabel('Email').fill(email);
  await page.getByLabel('Password').fill('short');
  await page.getByLabel('Organisation name').fill('E2E Hosting');
  await page.getByRole('button', { name: 'Sign up', exact: true }).click();
  const passwordError = page.locator('#auth-password-error');
  await passwordError.waitFor();
  assert.match(await passwordError.innerText(), /VALIDATION/);
  assert.equal(await page.getByLabel('Password').getAttribute('aria-invalid'), 'true');
  await shot(page, '02-sign-up-validation');
  await checkA11y(page, 'sign-up form with a validation error');

  await page.getByLabel('Password').fill('correct horse battery');
  await page.getByRole('button', { name: 'Sign up', exact: true }).click();

  // Register a machine: the model comes from the API's GPU catalog and
  // fills in the VRAM.
  await page.getByRole('heading', { name: 'Register a machine' }).waitFor();
  await page.getByRole('heading', { name: 'My machines' }).waitFor();
  await page.getByText('No machines yet').waitFor();
  assert.ok(await page.evaluate(() => sessionStorage.getItem('gpumarket.token')), 'the JWT is in sessionStorage');
  const select = page.getByLabel('GPU model');
  await page.waitForFunction(() => {
    const s = /** @type {HTMLSelectElement | null} */ (document.querySelector('#m-model'));
    return !!s && !s.disabled && s.options.length > 1;
  });
  const options = await select.locator('option').evaluateAll((os) =>
    os.map((o) => ({ value: /** @type {HTMLOptionElement} */ (o).value, text: o.textContent ?? '' })),
  );
  const model = options.find((o) => o.value !== '');
  assert.ok(model, 'the catalog offers at least one GPU model');
  const vram = /\((\d+) GiB/.exec(model.text)?.[1];
  assert.ok(vram, `the option shows its VRAM: ${model.text}`);
  await page.getByLabel('Machine name').fill('e2e-rig');
  await select.selectOption(model.value);
  assert.equal(await page.getByLabel('VRAM per GPU (GiB)').inputValue(), vram);
  await page.getByLabel('GPUs', { exact: true }).fill('2');
  await page.getByLabel('Country').fill('DE');
  await shot(page, '03-register-machine');
  await checkA11y(page, 'register form');
  await page.getByRole('button', { name: 'Register machine' }).click();

  // The install command with the agent token, shown once, with a copy button.
  await page.getByRole('heading', { name: /e2e-rig is registered/ }).waitFor();
  const command = await page.getByLabel('Agent install command').inputValue();
  const parsed = /^gpumarket agent --machine-id (\S+) --token (\S+)$/.exec(command);
  assert.ok(parsed, `install command: ${command}`);
  const token = parsed[2];
  await page.getByRole('button', { name: 'Copy' }).click();
  await page.getByText('Copied to the clipboard.').waitFor();
  assert.equal(await page.evaluate(() => navigator.clipboard.readText()), command);
  await shot(page, '04-agent-token');
  await checkA11y(page, 'agent token shown');
  await page.getByRole('button', { name: 'I have saved the token' }).click();
  await page.getByRole('heading', { name: 'Register a machine' }).waitFor();
  assert.ok(!(await page.content()).includes(token), 'the token is gone from the page');

  // My machines: offline, not listed, no price; listing needs a price.
  const row = page.getByRole('listitem').filter({ has: page.getByRole('heading', { name: 'e2e-rig' }) });
  await row.getByText('Not listed').waitFor();
  await row.getByText('Offline').waitFor();
  assert.ok(await row.getByRole('button', { name: 'List e2e-rig' }).isDisabled(), 'no listing without a price');
  await row.getByLabel(/Price per GPU-hour/).fill('0.35');
  await row.getByRole('button', { name: 'Save price' }).click();
  await row.getByText(/0\.35\d* USD per GPU-hour/).waitFor();
  await row.getByRole('button', { name: 'List e2e-rig' }).click();
  await row.getByText('Listed', { exact: true }).waitFor();
  await row.getByRole('button', { name: 'Unlist e2e-rig' }).waitFor();
  await shot(page, '05-machine-listed');

  // The agent, started with the command from the page, brings it online.
  if (AGENT_BIN) {
    startAgent(command.split(' ').slice(1), model.value, vram);
    await row.getByText('Online', { exact: true }).waitFor({ timeout: 30_000 });
    await row.getByText(/last heartbeat/).waitFor();
    await shot(page, '06-machine-online');
  }

  // The earnings preview: the price less the platform fee, whose rate is the
  // API's public terms (so a new host, with no earnings yet, sees the net),
  // per GPU-hour and per day at the utilisation.
  const feeRate = Number((await gql('{ platform { platformFeeRate } }')).platform.platformFeeRate);
  assert.ok(feeRate > 0 && feeRate < 1, `a fee rate from the API: ${feeRate}`);
  const fmt = pageMoney(page, 'USD');
  const preview = row.getByRole('group', { name: 'Earnings preview' });
  assert.equal(await preview.getByLabel('Utilisation (%)').inputValue(), '70', 'utilisation defaults to 70 %');
  /** @param {number} utilisation */
  const expectPreview = async (utilisation) => {
    const hours = 2 * 24 * (utilisation / 100);
    assert.equal(await preview.getByTestId('gross-hour').innerText(), await fmt(0.35, 4));
    assert.equal(await preview.getByTestId('net-hour').innerText(), await fmt(0.35 * (1 - feeRate), 4));
    assert.equal(await preview.getByTestId('net-day').innerText(), await fmt(0.35 * (1 - feeRate) * hours));
    assert.equal(await preview.getByTestId('fee-unknown').count(), 0, 'the fee rate is known before any earnings');
  };
  await expectPreview(70);
  await preview.getByLabel('Utilisation (%)').fill('50');
  await expectPreview(50);
  await preview.getByLabel('Utilisation', { exact: true }).focus();
  await page.keyboard.press('ArrowRight');
  assert.equal(await preview.getByLabel('Utilisation (%)').inputValue(), '55', 'the slider moves by keyboard');
  await expectPreview(55);
  await preview.getByLabel('Utilisation (%)').fill('70');
  await preview.screenshot({ path: join(SHOTS, '09-earnings-preview.png') });

  // The machine's state in detail: online, reliability and its evidence,
  // verification and what is missing.
  await row.getByText('Live state and verification').click();
  await row.getByText('Reliability', { exact: true }).waitFor();
  await row.getByText('Heartbeat gaps (the evidence behind reliability)').waitFor();
  await row.getByText(/No gaps in the reliability window|still silent|\d+ (s|min|h)$/).first().waitFor();
  await row.getByText('Host verification', { exact: true }).waitFor();
  await row.getByText('Still missing').waitFor();
  await row.screenshot({ path: join(SHOTS, '10-machine-state.png') });

  // Earnings: nothing yet, and each part says so.
  const earningsCard = page.getByRole('region', { name: 'Earnings', exact: true });
  await earningsCard.getByTestId('earnings-total').waitFor();
  assert.equal(await earningsCard.getByTestId('earnings-total').innerText(), await fmt(0));
  await earningsCard.getByTestId('earnings-empty').waitFor();
  await earningsCard.getByTestId('statements-empty').waitFor();
  await earningsCard.getByTestId('payouts-empty').waitFor();
  await earningsCard.screenshot({ path: join(SHOTS, '11-earnings.png') });
  await checkA11y(page, 'machine list');

  // Phone width: the machine list fits without sideways scrolling.
  await page.setViewportSize({ width: 390, height: 844 });
  await row.getByRole('button', { name: 'Save price' }).waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await page.getByRole('heading', { name: 'My machines' }).scrollIntoViewIfNeeded();
  await page.screenshot({ path: join(SHOTS, '12-phone-machine-list.png') });
  await checkA11y(page, 'machine list at phone width');
  await page.setViewportSize({ width: 1100, height: 900 });

  // A reload keeps the session and shows the machine listed, from the API.
  await page.reload();
  await row.getByText('Listed', { exact: true }).waitFor();
  await row.getByText(/0\.35\d* USD per GPU-hour/).waitFor();
  assert.ok(!(await page.content()).includes(token), 'the token is not shown again');

  // The billing page is served at its own route by the same build.
  await page.getByRole('link', { name: 'Billing' }).click();
  await page.getByRole('heading', { name: 'Billing', level: 1 }).waitFor();
  await shot(page, '07-billing');

  // Only the public API: nothing but the app's own files and /graphql.
  const other = requests.filter((p) => !p.startsWith('/portal') && !p.startsWith('/billing') && p !== '/graphql');
  assert.deepEqual(other, [], 'requests outside the public API');
  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
});

test('a host logs in with the keyboard alone, and a wrong password shows the API error', async () => {
  // An account made through the public API, as any client could.
  const email = `keyboard-${Date.now()}@e2e.example`;
  const password = 'correct horse battery';
  /** @type {Response} */
  const res = await fetch(`${BASE}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({
      query: 'mutation($input: SignUpInput!) { signUp(input: $input) { token } }',
      variables: { input: { email, password, tenantName: 'Keyboard Hosting', roles: ['HOST'] } },
    }),
  });
  assert.equal(res.status, 200);
  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const page = await context.newPage();
  page.setDefaultTimeout(TIMEOUT);
  await page.goto(`${BASE}/portal`);
  await page.getByRole('heading', { name: 'Create a host account' }).waitFor();
  const focused = () => page.evaluate(() => document.activeElement?.id || document.activeElement?.textContent || '');

  // Tab order: the two nav links, then the account tabs.
  for (let i = 0; i < 4; i++) await page.keyboard.press('Tab');
  assert.equal(await focused(), 'Log in');
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Log in', level: 2 }).waitFor();
  await page.keyboard.press('Tab');
  assert.equal(await focused(), 'auth-email');
  await page.keyboard.type(email);
  await page.keyboard.press('Tab');
  assert.equal(await focused(), 'auth-password');
  await page.keyboard.type('wrong password');
  await page.keyboard.press('Enter');
  const alert = page.getByRole('alert');
  await alert.waitFor();
  assert.match(await alert.innerText(), /UNAUTHENTICATED/);
  await shot(page, '08-log-in-error');
  await checkA11y(page, 'log-in error');

  await page.keyboard.press('Control+A');
  await page.keyboard.type(password);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'My machines' }).waitFor();
  await page.getByText('No machines yet').waitFor();
  await context.close();
});

test('the gateway serves the build at /portal and /billing, and 404 for a missing asset', async () => {
  for (const path of ['/portal', '/portal/machines/x', '/billing']) {
    /** @type {Response} */
    const res = await fetch(`${BASE}${path}`);
    assert.equal(res.status, 200, path);
    assert.match(res.headers.get('content-type') ?? '', /text\/html/, path);
  }
  /** @type {Response} */
  const missing = await fetch(`${BASE}/portal/assets/missing-0000.js`);
  assert.equal(missing.status, 404);
});
