#!/usr/bin/env node
// The service's command line, the same on a development clone and in the container image: it runs the built code in
// dist/ and never builds (a build under a running service would pull its files away mid-request). After changing
// the code, `npm run build` first.
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const commands = {
  apikey: ['src/auth/apikey.cli.js', 'create, list and revoke API keys; bootstrap the first one'],
  migrate: ['src/database/migrate.cli.js', 'apply pending migrations (under the advisory lock)'],
  certify: ['src/certify.cli.js', "run an operation's contract suite on a provider"],
};

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const [command, ...args] = process.argv.slice(2);
const entry = commands[command];
if (!entry) {
  const list = Object.entries(commands).map(([name, [, what]]) => `  onejob ${name.padEnd(8)} ${what}`);
  process.stderr.write(`usage: onejob <command> [arguments]\n${list.join('\n')}\n`);
  process.exit(command === undefined || command === '--help' || command === '-h' ? 0 : 2);
}
const script = join(root, 'dist', entry[0]);
if (!existsSync(script)) {
  process.stderr.write(`onejob ${command}: ${script} is missing: build first (npm run build)\n`);
  process.exit(1);
}
process.argv = [process.argv[0], script, ...args];
await import(pathToFileURL(script).href);
