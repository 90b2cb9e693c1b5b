// End-to-end: the webhooks page, the same component on the billing page
// (/billing/webhooks, a renter) and in the host portal (/portal/webhooks, a
// host). Each user logs in, reaches the page through the page's navigation,
// gets the API's VALIDATION message at the URL field for `ftp://x` and
// `http://10.0.0.1/` (nothing created), adds an endpoint with two event
// types and sees its signing secret once, finds it listed, sends a test
// that this file's receiver gets signed with that secret (the delivery log
// shows it delivered, with its attempt and payload), sees a failing attempt
// (HTTP 500 and the receiver's answer) and redelivers it with the same
// webhook-id, rotates the secret (shown once, with until when the old one
// still signs; the next delivery carries both signatures), disables and
// enables it, cancels a deletion and then deletes it. axe at each state,
// no sideways scrolling at 390 px.
//
// The receiver is an HTTP server on 127.0.0.1 in this process: the stack
// must allow loopback receivers (GPUMARKET_WEBHOOKS_ALLOW_LOCAL=true, which
// web/e2e/run.sh sets; private addresses such as 10.0.0.1 stay refused).
// Against a stack that refuses them the tests are skipped.
// Needs GPUMARKET_WEB_E2E_URL (web/e2e/run.sh).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import { PASSWORD, BASE, browserForFile, gql, shot, signUp, until, watchedPage } from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile('webhooks page state');

/**
 * @typedef {{ id: string, timestamp: string, signature: string, body: string, type: string }} Received
 */

/**
 * A webhook receiver on 127.0.0.1: records every request and answers with
 * `status` and `body`, which the test changes.
 */
async function startReceiver() {
  /** @type {Received[]} */
  const received = [];
  const answer = { status: 200, body: 'ok' };
  const server = createServer((req, res) => {
    /** @type {Buffer[]} */
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      let type = '';
      try {
        type = JSON.parse(body).type;
      } catch {
        // recorded as is
      }
      received.push({
        id: String(req.headers['webhook-id'] ?? ''),
        timestamp: String(req.headers['webhook-timestamp'] ?? ''),
        signature: String(req.headers['webhook-signature'] ?? ''),
        body,
        type,
      });
      res.writeHead(answer.status, { 'content-type': 'text/plain' });
      res.end(answer.body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(undefined)));
  const address = server.address();
  if (!address || typeof address === 'string') throw new Error('the receiver has no port');
  return {
    url: `http://127.0.0.1:${address.port}/hooks`,
    received,
    answer,
    close: () => new Promise((resolve) => server.close(() => resolve(undefined))),
  };
}

/**
 * Whether the Standard Webhooks signature header of `r` carries a `v1`
 * signature made with `secret` (`whsec_` and the key in base64).
 * @param {Received} r @param {string} secret
 */
function signedWith(r, secret) {
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const expected = createHmac('sha256', key).update(`${r.id}.${r.timestamp}.${r.body}`).digest();
  return r.signature.split(' ').some((part) => {
    const [version, sig] = part.split(',');
    if (version !== 'v1' || !sig) return false;
    const got = Buffer.from(sig, 'base64');
    return got.length === expected.length && timingSafeEqual(got, expected);
  });
}

/** Whether the stack accepts a loopback receiver (GPUMARKET_WEBHOOKS_ALLOW_LOCAL). */
async function loopbackAllowed() {
  const probe = await signUp('RENTER', 'webhooks-probe');
  const res = await fetch(`${BASE}/graphql`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${probe.token}` },
    body: JSON.stringify({
      query: 'mutation($i: CreateWebhookEndpointInput!) { createWebhookEndpoint(input: $i) { endpoint { id } } }',
      variables: { i: { url: 'http://127.0.0.1:9/probe' } },
    }),
  });
  const body = await res.json();
  return !body.errors?.length;
}

const LOCAL = await loopbackAllowed();
const SKIP = LOCAL
  ? false
  : 'the stack refuses loopback webhook receivers: start it with GPUMARKET_WEBHOOKS_ALLOW_LOCAL=true (web/e2e/run.sh does)';

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

/** The tenant's endpoints through the API. @param {string} token */
async function endpointsOf(token) {
  return /** @type {any[]} */ ((await gql('{ webhookEndpoints { id url description eventTypes enabled disabledReason previousSecretUntil } }', {}, token)).webhookEndpoints);
}

/** The text of the page's focused element. @param {import('playwright-core').Page} page */
const focused = (page) => page.evaluate(() => document.activeElement?.textContent?.trim() ?? '');

/**
 * The whole page, for one user on one surface.
 * @param {{ surface: 'billing' | 'portal', role: 'RENTER' | 'HOST', tag: string }} who
 */
async function exercise({ surface, role, tag }) {
  const receiver = await startReceiver();
  const user = await signUp(role, tag);
  const context = await browser().newContext({
    viewport: { width: 1100, height: 900 },
    permissions: ['clipboard-read', 'clipboard-write'],
  });
  const { page, consoleErrors, requests } = await watchedPage(context);
  const state = (/** @type {string} */ s) => `${surface} webhooks: ${s}`;
  const screenshot = (/** @type {string} */ name) => shot(page, `webhooks-${surface}-${name}`);

  try {
    // Log in, then reach the page through the page's own navigation.
    await page.goto(`${BASE}/${surface}`);
    if (surface === 'portal') await page.getByRole('tab', { name: 'Log in' }).click();
    await page.getByLabel('Email').fill(user.email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Log in' }).click();
    const nav = page.getByRole('navigation', { name: surface === 'portal' ? 'Host portal pages' : 'Billing pages' });
    await nav.getByRole('link', { name: 'Webhooks' }).click();
    await page.getByRole('heading', { name: 'Add a webhook endpoint' }).waitFor();
    assert.equal(new URL(page.url()).pathname, `/${surface}/webhooks`);
    assert.equal(await nav.getByRole('link', { name: 'Webhooks' }).getAttribute('aria-current'), 'page');
    // A reload stays on the page.
    await page.reload();
    await page.getByRole('heading', { name: 'Add a webhook endpoint' }).waitFor();
    await page.getByText('No webhook endpoints yet.').waitFor();
    await page.getByText('No deliveries yet', { exact: false }).waitFor();
    // Every event type the API offers is a checkbox.
    const types = (await gql('{ webhookEventTypes { name } }')).webhookEventTypes.map((/** @type {any} */ t) => t.name);
    assert.ok(types.length > 0);
    for (const t of types) assert.equal(await page.locator(`#webhook-type-${t.replace(/\./g, '\\.')}`).count(), 1, `a checkbox for ${t}`);
    await checkA11y(page, state('empty'));
    await screenshot('01-empty');

    // Invalid URLs: the API's VALIDATION message at the URL field, nothing created.
    const urlInput = page.getByLabel('Endpoint URL');
    const urlError = page.locator('#webhook-url-error');
    for (const [bad, why] of [
      ['ftp://x', /https/],
      ['http://10.0.0.1/', /private/],
    ]) {
      await urlInput.fill(String(bad));
      await page.getByRole('button', { name: 'Add endpoint' }).click();
      await until(async () => why instanceof RegExp && why.test(await urlError.innerText().catch(() => '')), `the error for ${bad}`, 10_000, 100);
      assert.match(await urlError.innerText(), /VALIDATION/);
      assert.equal(await urlInput.getAttribute('aria-invalid'), 'true');
      assert.match(String(await urlInput.getAttribute('aria-describedby')), /webhook-url-error/);
    }
    assert.deepEqual(await endpointsOf(user.token), [], 'no endpoint was created');
    await checkA11y(page, state('invalid URL'));
    await screenshot('02-invalid-url');

    // Added with a description and two event types, from the keyboard (Enter
    // in the URL field): the secret is shown once.
    await page.getByLabel('Description (optional)').fill('e2e receiver');
    await page.getByLabel(/^instance\.running/).check();
    await page.getByLabel(/^balance\.low/).check();
    await urlInput.fill(receiver.url);
    await urlInput.press('Enter');
    const secretInput = page.getByLabel('Signing secret', { exact: true });
    await secretInput.waitFor();
    const secret = await secretInput.inputValue();
    assert.match(secret, /^whsec_[A-Za-z0-9+/=]{20,}$/);
    assert.equal(await focused(page), 'Webhook endpoint added', 'focus moves to the secret');
    await page.getByText('Copy it now: it will not be shown again.').waitFor();
    await page.getByRole('button', { name: 'Copy' }).click();
    await page.getByText('Copied to the clipboard.').waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), secret);
    await checkA11y(page, state('new secret'));
    await fitsPhone(page, state('new secret'));
    await screenshot('03-secret');
    const [endpoint] = await endpointsOf(user.token);
    assert.equal(endpoint.url, receiver.url);
    assert.equal(endpoint.description, 'e2e receiver');
    assert.deepEqual([...endpoint.eventTypes].sort(), ['balance.low', 'instance.running']);

    // Dismissed: the secret is gone from the page for good.
    await page.getByRole('button', { name: 'I have saved the secret' }).click();
    await page.getByRole('heading', { name: 'Add a webhook endpoint' }).waitFor();
    await until(async () => (await focused(page)) === 'Webhook endpoints', 'focus on the endpoints', 5_000, 50);
    assert.equal(await urlInput.inputValue(), '', 'the form is empty again');
    assert.equal(await page.getByLabel('Description (optional)').inputValue(), '');
    assert.equal(await page.getByLabel(/^instance\.running/).isChecked(), false);
    assert.equal(await page.content().then((html) => html.includes(secret.slice(6))), false, 'the secret is not in the page');

    // Listed: URL, description, event types, enabled.
    const item = page.locator(`li[data-endpoint-id="${endpoint.id}"]`);
    await item.getByRole('heading', { name: receiver.url }).waitFor();
    const listed = await item.innerText();
    assert.match(listed, /e2e receiver/);
    assert.match(listed, /instance\.running, balance\.low|balance\.low, instance\.running/);
    assert.match(listed, /Enabled/);
    await checkA11y(page, state('endpoint listed'));
    await fitsPhone(page, state('endpoint listed'));
    await screenshot('04-listed');

    // A test: the receiver gets it signed with the secret; the log shows it delivered.
    await page.getByRole('button', { name: `Send test to ${receiver.url}` }).click();
    await item.getByText(/Test event sent: delivery msg_/).waitFor();
    const ping = await until(async () => receiver.received.find((r) => r.type === 'webhook.test'), 'the test at the receiver', 20_000, 100);
    assert.ok(signedWith(ping, secret), `the test is signed with the secret shown: ${ping.signature}`);
    const logRow = (/** @type {string} */ webhookId) => page.locator('tr[data-delivery-id]').filter({ hasText: webhookId });
    const row = logRow(ping.id);
    const refresh = page.getByRole('button', { name: 'Refresh' });
    await until(
      async () => {
        await refresh.click();
        return /delivered/.test(await row.innerText().catch(() => ''));
      },
      'the test delivered in the log',
      20_000,
      500,
    );
    const rowText = await row.innerText();
    assert.match(rowText, /webhook\.test/);
    assert.match(rowText, /HTTP 200/);
    await row.getByRole('button', { name: /^Details of webhook\.test/ }).click();
    const details = page.locator('tr.wh-details');
    await details.waitFor();
    const detailText = await details.innerText();
    assert.match(detailText, /succeeded/);
    assert.match(detailText, /"type": "webhook\.test"/);
    assert.ok(detailText.includes(endpoint.id), 'the payload names the endpoint');
    await checkA11y(page, state('delivery log with details'));
    await fitsPhone(page, state('delivery log with details'));
    await screenshot('05-delivered');
    await row.getByRole('button', { name: /^Details of webhook\.test/ }).click();

    // A failing receiver: the attempt's HTTP status and answer in the log;
    // "Redeliver" sends it again with the same webhook-id.
    receiver.answer.status = 500;
    receiver.answer.body = 'receiver down for e2e';
    const before = receiver.received.length;
    await page.getByRole('button', { name: `Send test to ${receiver.url}` }).click();
    const failed = await until(async () => receiver.received.slice(before).find((r) => r.type === 'webhook.test'), 'the failing test at the receiver', 20_000, 100);
    const failedRow = logRow(failed.id);
    await until(
      async () => {
        await refresh.click();
        return /HTTP 500/.test(await failedRow.innerText().catch(() => ''));
      },
      'the failed attempt in the log',
      20_000,
      500,
    );
    assert.match(await failedRow.innerText(), /pending|failed/);
    await failedRow.getByRole('button', { name: /^Details of/ }).click();
    await until(async () => /receiver down for e2e/.test(await page.locator('tr.wh-details').innerText()), 'the response head', 5_000, 100);
    await checkA11y(page, state('failed delivery'));
    await screenshot('06-failed');
    receiver.answer.status = 200;
    receiver.answer.body = 'ok';
    await failedRow.getByRole('button', { name: /^Redeliver/ }).click();
    await failedRow.getByText('Sent again.').waitFor();
    await until(
      async () => {
        await refresh.click();
        return /delivered/.test(await failedRow.innerText().catch(() => ''));
      },
      'the redelivery delivered',
      20_000,
      500,
    );
    const again = receiver.received.filter((r) => r.id === failed.id);
    assert.ok(again.length >= 2, `sent again with the same webhook-id (${again.length} times)`);
    assert.ok(again.every((r) => signedWith(r, secret)));
    await failedRow.getByRole('button', { name: /^Details of/ }).click();

    // Rotation: the new secret once, and until when the old one still signs.
    await page.getByRole('button', { name: `Rotate secret of ${receiver.url}` }).click();
    await page.getByRole('heading', { name: 'New signing secret' }).waitFor();
    const rotated = await page.getByLabel('Signing secret', { exact: true }).inputValue();
    assert.match(rotated, /^whsec_/);
    assert.notEqual(rotated, secret);
    await page.getByText('Copy it now: it will not be shown again.').waitFor();
    const [afterRotation] = await endpointsOf(user.token);
    const until_ = await page.getByTestId('webhook-previous-until').locator('time').getAttribute('datetime');
    assert.equal(until_, afterRotation.previousSecretUntil, 'the page says until when the previous secret signs');
    assert.ok(Date.parse(String(until_)) > Date.now(), 'the previous secret still signs for a while');
    await checkA11y(page, state('rotated secret'));
    await screenshot('07-rotated');
    await page.getByRole('button', { name: 'I have saved the secret' }).click();
    assert.equal(await page.content().then((html) => html.includes(rotated.slice(6))), false, 'the new secret is not in the page');
    await item.getByText(/also signs until/).waitFor();
    // The next delivery is signed with both.
    const beforeRotated = receiver.received.length;
    await page.getByRole('button', { name: `Send test to ${receiver.url}` }).click();
    const both = await until(async () => receiver.received.slice(beforeRotated).find((r) => r.type === 'webhook.test'), 'a test after the rotation', 20_000, 100);
    assert.ok(signedWith(both, rotated), 'signed with the new secret');
    assert.ok(signedWith(both, secret), 'and with the previous one');

    // Disable, then enable.
    await page.getByRole('button', { name: `Disable ${receiver.url}` }).click();
    await item.getByText('Disabled: no events are sent to it.').waitFor();
    assert.match(await item.innerText(), /Disabled \(reason: disabled by its owner\)/);
    assert.equal((await endpointsOf(user.token))[0].enabled, false);
    await checkA11y(page, state('disabled endpoint'));
    await screenshot('08-disabled');
    await page.getByRole('button', { name: `Enable ${receiver.url}` }).click();
    await item.getByText('Enabled: events are sent to it again.').waitFor();
    assert.equal((await endpointsOf(user.token))[0].enabled, true);

    // The log of this endpoint alone.
    await page.getByRole('button', { name: `Deliveries of ${receiver.url}` }).click();
    assert.equal(await page.getByLabel('Endpoint', { exact: true }).inputValue(), endpoint.id);
    await until(async () => (await page.locator('tr[data-delivery-id]').count()) >= 3, 'the endpoint\'s deliveries', 10_000, 200);
    assert.equal(await page.getByRole('columnheader', { name: 'Endpoint' }).count(), 0, 'one endpoint: no endpoint column');

    // Deleting asks first: cancelling keeps it, and focus returns.
    await page.getByRole('button', { name: `Delete ${receiver.url}` }).click();
    const confirm = page.getByRole('button', { name: `Yes, delete ${receiver.url}` });
    await confirm.waitFor();
    assert.equal(await focused(page), `Yes, delete ${receiver.url}`, 'focus moves to the confirmation');
    await checkA11y(page, state('delete confirmation'));
    await screenshot('09-confirm-delete');
    await page.keyboard.press('Tab');
    await page.keyboard.press('Enter');
    await until(async () => (await focused(page)) === 'Delete', 'focus back on Delete', 5_000, 50);
    assert.equal((await endpointsOf(user.token)).length, 1, 'cancelled: still there');

    // Deleted, from the keyboard: gone with its delivery log.
    await page.keyboard.press('Enter');
    await until(async () => (await focused(page)) === `Yes, delete ${receiver.url}`, 'focus on the confirmation', 5_000, 50);
    await page.keyboard.press('Enter');
    await page.getByText('No webhook endpoints yet.').waitFor();
    assert.deepEqual(await endpointsOf(user.token), []);
    await until(async () => (await page.getByText('No deliveries yet', { exact: false }).count()) > 0, 'the log emptied', 10_000, 200);
    assert.deepEqual((await gql('{ webhookDeliveries { id } }', {}, user.token)).webhookDeliveries, []);
    await checkA11y(page, state('after deleting'));
    await screenshot('10-deleted');

    assert.deepEqual(consoleErrors, [], 'no console errors');
    // The billing page's assets are the one build's, under /portal/.
    const foreign = requests.filter((p) => !p.startsWith('/portal') && !p.startsWith('/billing') && p !== '/graphql');
    assert.deepEqual(foreign, [], 'the page requests only its own assets and the API');
  } finally {
    await context.close();
    await receiver.close();
  }
}

test('a renter manages webhooks on the billing page', { skip: SKIP }, async () => {
  await exercise({ surface: 'billing', role: 'RENTER', tag: 'webhooks-renter' });
});

test('a host manages webhooks in the portal', { skip: SKIP }, async () => {
  await exercise({ surface: 'portal', role: 'HOST', tag: 'webhooks-host' });
});
