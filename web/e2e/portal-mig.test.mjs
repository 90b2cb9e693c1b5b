// End-to-end: a host runs a GPU as MIG slices from the portal, a renter
// rents one slice through the public GraphQL API, and the portal shows the
// slice on the GPU's bar of memory slices, with the instance that holds it.
// The host lists a 2-GPU H100 machine (MIG-capable) through the API and runs
// its agent with simulated GPUs, as portal-earnings.test.mjs does; a renter
// with credit from the demo operator (seeded by `gpumarket dev`) orders a
// `3g.40gb` slice. Needs GPUMARKET_WEB_E2E_URL and GPUMARKET_E2E_AGENT_BIN
// (web/e2e/run.sh).
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
  signUp,
  startAgent,
  until,
  watchedPage,
} from './lib.mjs';
import { checkA11y } from './portal-axe.mjs';

const browser = browserForFile('page state');

/** A MIG-capable model of the catalog (migrations: mig_slices) and a profile of it. */
const MODEL = 'H100 80GB SXM';
const PROFILE = '3g.40gb';

test('a host sets a GPU to MIG in the portal and sees a renter\'s 3g.40gb slice on its bar', { skip: !AGENT_BIN && 'GPUMARKET_E2E_AGENT_BIN is not set' }, async () => {
  const models = (await gql('{ gpuModels { name vramGib migProfiles { name memorySlices placements } } }')).gpuModels;
  const model = models.find((/** @type {any} */ m) => m.name === MODEL);
  assert.ok(model, `the catalog has ${MODEL}`);
  const profile = model.migProfiles.find((/** @type {any} */ p) => p.name === PROFILE);
  assert.ok(profile, `${MODEL} has the MIG profile ${PROFILE}: ${JSON.stringify(model.migProfiles)}`);
  assert.equal(profile.memorySlices, 4);

  const host = await signUp('HOST', 'mig-host');
  const { machineId, agentToken } = await listedMachine(host.token, model, {
    name: 'mig-rig',
    country: 'SE',
    idempotencyKey: `mig-${Date.now()}`,
    pricePerGpuHour: '1.60',
  });
  startAgent(['agent', '--machine-id', machineId, '--token', agentToken], model.name, model.vramGib);

  // In the portal: log in; the machine's GPUs, both whole at first.
  const context = await browser().newContext({ viewport: { width: 1100, height: 900 } });
  const { page, consoleErrors } = await watchedPage(context);
  await page.goto(`${BASE}/portal`);
  await page.getByRole('tab', { name: 'Log in' }).click();
  await page.getByLabel('Email').fill(host.email);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Log in', exact: true }).click();
  const row = page.getByRole('listitem').filter({ has: page.getByRole('heading', { name: 'mig-rig' }) });
  await row.waitFor();
  const openGpus = () => row.locator('summary').filter({ hasText: /^GPUs$/ }).click();
  await openGpus();
  const gpu0 = row.locator('li.gpu[data-gpu-index="0"]');
  await gpu0.waitFor();
  assert.equal(await gpu0.getAttribute('data-mode'), 'WHOLE', 'a new machine\'s GPUs are whole');
  assert.equal(await row.locator('li.gpu').count(), 2, 'both GPUs of the machine are shown');
  await row.getByText(`MIG profiles of the ${MODEL}:`).waitFor();
  await checkA11y(page, 'machine GPUs, all whole');

  // GPU 0 to MIG with automatic placement, through the form.
  await row.getByLabel('GPU', { exact: true }).selectOption('0');
  await row.getByLabel('Mode', { exact: true }).selectOption('MIG_AUTO');
  await row.getByRole('button', { name: 'Set GPU mode' }).click();
  await row.getByRole('status').filter({ hasText: 'GPU 0 now runs as: MIG, automatic placement.' }).waitFor();
  const bar = row.getByRole('list', { name: 'GPU 0 memory slices' });
  await bar.waitFor();
  assert.equal(await gpu0.getAttribute('data-mode'), 'MIG_AUTO');
  assert.equal(await bar.locator('li.free').count(), 8, 'all 8 memory slices free');
  assert.equal(await row.getByRole('list', { name: 'GPU 1 memory slices' }).count(), 0, 'GPU 1 stays whole');
  await row.screenshot({ path: join(SHOTS, 'mig-01-gpu0-mig-auto.png') });
  await checkA11y(page, 'machine GPUs, GPU 0 in MIG');
  // The API says so too.
  const mine = (await gql('{ myMachines { id gpus { index mode } } }', {}, host.token)).myMachines;
  const gpus = mine.find((/** @type {any} */ m) => m.id === machineId).gpus;
  assert.deepEqual(
    gpus.map((/** @type {any} */ g) => [g.index, g.mode]),
    [
      [0, 'MIG_AUTO'],
      [1, 'WHOLE'],
    ],
  );

  // A renter with credit finds the slice on the offer and orders it.
  const renter = await signUp('RENTER', 'mig-renter');
  const op = await operatorToken();
  await grantCredit(op, renter.tenantId, '50', `mig-credit-${Date.now()}`);
  const offer = await until(
    async () => {
      const nodes = (
        await gql(
          'query($p: String!) { offers(first: 100, filter: { migProfile: $p }) { nodes { id machineId migSlices { profile free pricePerHour } } } }',
          { p: PROFILE },
          renter.token,
        )
      ).offers.nodes;
      return nodes.find(
        (/** @type {any} */ o) =>
          o.machineId === machineId && o.migSlices.some((/** @type {any} */ s) => s.profile === PROFILE && s.free > 0),
      );
    },
    `the machine offered with a free ${PROFILE}`,
    30_000,
  );
  const slice = offer.migSlices.find((/** @type {any} */ s) => s.profile === PROFILE);
  console.log(`# offer: ${PROFILE} ${slice.free} free at ${slice.pricePerHour} per hour`);
  const ordered = (
    await gql(
      'mutation($input: CreateOrderInput!) { createOrder(input: $input) { id migProfile state } }',
      { input: { offerId: offer.id, gpuCount: 1, migProfile: PROFILE, idempotencyKey: `mig-order-${Date.now()}` } },
      renter.token,
    )
  ).createOrder;
  assert.equal(ordered.migProfile, PROFILE);
  await until(
    async () => (await gql('query($id: ID!) { instance(id: $id) { state } }', { id: ordered.id }, renter.token)).instance.state === 'RUNNING',
    'the slice\'s instance running',
    30_000,
  );

  // A reload: GPU 0's bar shows the slice, rented by the renter's instance.
  await page.reload();
  await row.waitFor();
  await openGpus();
  await bar.waitFor();
  const held = bar.locator(`li.held[data-profile="${PROFILE}"]`);
  await held.waitFor();
  assert.equal(await held.getAttribute('data-instance-id'), ordered.id);
  assert.equal(await held.getAttribute('data-size'), '4');
  const start = Number(await held.getAttribute('data-start'));
  assert.ok(profile.placements.includes(start), `${PROFILE} starts at one of its placements: ${start}`);
  assert.match(await held.innerText(), new RegExp(`${PROFILE.replace('.', '\\.')}[\\s\\S]*rented by instance ${ordered.id.slice(0, 8)}`));
  assert.equal(await bar.locator('li.free').count(), 4, 'the other 4 memory slices free');
  await gpu0.getByText('4 of 8 memory slices in use').waitFor();
  await row.screenshot({ path: join(SHOTS, 'mig-02-slice-rented.png') });
  await checkA11y(page, 'machine GPUs, a slice rented');

  // Phone width: the bar fits without sideways scrolling.
  await page.setViewportSize({ width: 390, height: 844 });
  await held.waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 0, `no sideways scrolling at 390 px (${overflow} px too wide)`);
  await checkA11y(page, 'machine GPUs at phone width');
  await page.setViewportSize({ width: 1100, height: 900 });

  // The renter's instance goes; nothing is left running.
  await gql('mutation($id: ID!) { destroyInstance(id: $id) { id } }', { id: ordered.id }, renter.token);
  assert.deepEqual(consoleErrors, [], 'console errors');
  await context.close();
});
