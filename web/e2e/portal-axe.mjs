// Accessibility check for the e2e tests: injects axe-core (a devDependency,
// read from node_modules, so no request leaves the page's origin) and fails
// on `serious` or `critical` violations.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const AXE = require.resolve('axe-core/axe.min.js');

/** What each check found, by page state, for the report. @type {Record<string, string[]>} */
export const axeFindings = {};

/**
 * Runs axe on the page as it is; fails on serious or critical violations.
 * @param {import('playwright-core').Page} page
 * @param {string} state a name for the page state, e.g. `sign-up form`
 */
export async function checkA11y(page, state) {
  const loaded = await page.evaluate(() => 'axe' in window);
  if (!loaded) await page.addScriptTag({ path: AXE });
  /** @type {{ id: string, impact: string | null, help: string, nodes: { target: unknown[] }[] }[]} */
  const violations = await page.evaluate(async () => {
    // @ts-ignore -- axe is injected above
    const result = await window.axe.run(document, {
      runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice'] },
      resultTypes: ['violations'],
    });
    return result.violations.map((/** @type {any} */ v) => ({
      id: v.id,
      impact: v.impact,
      help: v.help,
      nodes: v.nodes.map((/** @type {any} */ n) => ({ target: n.target })),
    }));
  });
  axeFindings[state] = violations.map((v) => `${v.impact} ${v.id}: ${v.help} (${v.nodes.length})`);
  const bad = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(
    bad.map((v) => `${v.impact} ${v.id}: ${v.help} at ${v.nodes.map((n) => JSON.stringify(n.target)).join(', ')}`),
    [],
    `axe: serious or critical violations on the ${state}`,
  );
}
