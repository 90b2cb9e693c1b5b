// Runs the GraphQL-over-HTTP specification's audit suite (graphql-http's
// serverAudits) against a running gateway: `node audit.mjs <graphql URL>`.
// Prints one line per audit; exits 1 on any error (a MUST) or warning (a
// SHOULD), so the system test that runs it fails with the list.
import { serverAudits } from 'graphql-http';

const url = process.argv[2];
if (!url) {
  console.error('usage: node audit.mjs <url of /graphql>');
  process.exit(2);
}

const counts = { ok: 0, notice: 0, warn: 0, error: 0 };
const failures = [];
for (const audit of serverAudits({ url })) {
  const result = await audit.fn();
  counts[result.status] += 1;
  if (result.status === 'ok') {
    console.log(`ok      ${result.name}`);
    continue;
  }
  let body = '';
  try {
    body = await result.response.text();
  } catch {
    // The audit may have read the body already.
  }
  const status = result.response?.status;
  const line = `${result.status.padEnd(7)} ${result.name}: ${result.reason} (HTTP ${status}) ${body.slice(0, 300)}`;
  console.log(line);
  failures.push(line);
}
const total = Object.values(counts).reduce((a, b) => a + b, 0);
console.log(
  `${counts.ok}/${total} ok, ${counts.notice} notices, ${counts.warn} warnings, ${counts.error} errors`,
);
process.exit(counts.warn + counts.error > 0 ? 1 : 0);
