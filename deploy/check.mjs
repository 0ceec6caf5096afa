#!/usr/bin/env node
// npm run deploy:check: what CI checks of the platform kit in deploy/ (docs/operations.md#platform-kit).
//   1. promtool check rules on the alert rules, and promtool test rules on their unit tests;
//   2. every PromQL expression of the Grafana dashboard parses (promtool check rules, as recording rules);
//   3. every Kubernetes object validates against its API schema (kubernetes-models); CloudNativePG's Cluster and
//      Pooler, whose CRDs kubernetes-models lacks, against the JSON schemas of the fields they use (cnpg-schema.mjs).
// That the series they name exist is checked against the service's registry by test/deploy-kit.e2e-spec.ts.
import { spawnSync } from 'node:child_process';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { parseAllDocuments, stringify } from 'yaml';

import { validateManifests } from './kubernetes-validate.mjs';

const here = dirname(fileURLToPath(import.meta.url));
let failed = false;

function promtool(args) {
  const run = spawnSync('promtool', args, { cwd: join(here, 'prometheus'), encoding: 'utf8' });
  if (run.error) {
    console.error('promtool is not installed: on Debian, apt-get install -y prometheus (see .ci/run)');
    process.exit(1);
  }
  process.stdout.write(run.stdout);
  process.stderr.write(run.stderr);
  if (run.status !== 0) failed = true;
}

promtool(['check', 'rules', 'alerts.yml']);
promtool(['test', 'rules', 'alerts.test.yml']);

// Grafana's own variables replaced by what Prometheus would receive.
const dashboard = JSON.parse(readFileSync(join(here, 'grafana', 'onejob.json'), 'utf8'));
const rules = dashboard.panels
  .flatMap((panel) => panel.targets ?? [])
  .map((target, i) => ({
    record: `dashboard:expr_${i}`,
    expr: target.expr.replaceAll('$__rate_interval', '5m').replaceAll('$job', '.*'),
  }));
console.log(`Checking the ${rules.length} expressions of grafana/onejob.json`);
// promtool reads rule files only: a scratch file under node_modules/.cache, which git ignores.
const scratch = join(here, '..', 'node_modules', '.cache', 'onejob-deploy-check');
mkdirSync(scratch, { recursive: true });
writeFileSync(join(scratch, 'dashboard-rules.yml'), stringify({ groups: [{ name: 'grafana-dashboard', rules }] }));
promtool(['check', 'rules', join(scratch, 'dashboard-rules.yml')]);
rmSync(scratch, { recursive: true, force: true });

const dir = join(here, 'kubernetes');
const documents = readdirSync(dir)
  .filter((file) => file.endsWith('.yaml'))
  .flatMap((file) =>
    parseAllDocuments(readFileSync(join(dir, file), 'utf8')).map((doc) => ({ file, object: doc.toJS() })),
  );
const problems = await validateManifests(documents);
for (const problem of problems) console.error(problem);
if (problems.length) failed = true;
else console.log(`Checking deploy/kubernetes: ${documents.length} objects valid`);

process.exit(failed ? 1 : 0);
