// Fails when src/gql/ is not what `npm run codegen` makes from the schema
// and the operations in src/: run `npm run codegen` and commit the result.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const tmp = mkdtempSync(join(tmpdir(), 'gpumarket-codegen-'));
try {
  try {
    execFileSync('npx', ['graphql-codegen', '--config', 'codegen.ts'], {
      stdio: ['ignore', 'ignore', 'inherit'],
      env: { ...process.env, CODEGEN_OUT: tmp + '/' },
    });
  } catch {
    console.error('the operations in src/ do not validate against api-specs/graphql/schema.graphql (above)');
    rmSync(tmp, { recursive: true, force: true });
    process.exit(1);
  }
  const fresh = readdirSync(tmp).sort();
  const committed = existsSync('src/gql') ? readdirSync('src/gql').sort() : [];
  const stale = [];
  for (const name of new Set([...fresh, ...committed])) {
    const a = fresh.includes(name) ? readFileSync(join(tmp, name), 'utf8') : null;
    const b = committed.includes(name) ? readFileSync(join('src/gql', name), 'utf8') : null;
    if (a !== b) stale.push(name);
  }
  if (stale.length > 0) {
    console.error(`src/gql/ is stale (${stale.join(', ')}): run \`npm run codegen\` in web/ and commit it`);
    rmSync(tmp, { recursive: true, force: true });
    process.exit(1);
  }
  console.log(`src/gql/ matches the schema (${fresh.length} files)`);
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
