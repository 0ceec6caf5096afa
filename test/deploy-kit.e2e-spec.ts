import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

import { parse, parseAllDocuments } from 'yaml';

// @ts-expect-error: a plain ESM script of deploy/, shared with `npm run deploy:check`
import { validateManifests } from '../deploy/kubernetes-validate.mjs';
import { SCOPES } from '../src/auth/scopes.js';
import { validateCatalog } from '../src/config/catalog.loader.js';
import { parseEnv } from '../src/config/env.js';
import { validateIssuers } from '../src/config/issuers.loader.js';
import { startTestApp, type TestApp } from './helpers/app.js';

/**
 * The platform kit of deploy/ against the code: the series the alert rules and the dashboard name exist in the
 * service's registry, and the Kubernetes objects validate, their catalog and environment included. promtool's own
 * checks (rule syntax, the rules' unit tests) run in `npm run deploy:check`.
 */
const KUBERNETES = 'deploy/kubernetes';
const documents = readdirSync(KUBERNETES)
  .filter((file) => file.endsWith('.yaml'))
  .flatMap((file) =>
    parseAllDocuments(readFileSync(join(KUBERNETES, file), 'utf8')).map((doc) => ({
      file,
      object: doc.toJS() as K8sObject,
    })),
  );

interface K8sObject {
  kind: string;
  metadata: { name: string };
  data?: Record<string, string>;
  spec?: { template?: { spec: { containers: { env?: { name: string; value?: string }[] }[] } } };
}

const alertExpressions = (): string[] => {
  const rules = parse(readFileSync('deploy/prometheus/alerts.yml', 'utf8')) as {
    groups: { rules: { expr: string }[] }[];
  };
  return rules.groups.flatMap((g) => g.rules.map((r) => r.expr));
};
const dashboardExpressions = (): string[] => {
  type Dashboard = { panels: { targets?: { expr: string }[] }[] };
  const dashboard = JSON.parse(readFileSync('deploy/grafana/onejob.json', 'utf8')) as Dashboard;
  return dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
};
/** The onejob series an expression names, a histogram's _bucket/_sum/_count read as the histogram. */
const seriesOf = (expr: string) => [...expr.matchAll(/\bonejob_[a-z0-9_]+/g)].map((m) => m[0]);

describe('the platform kit (deploy/)', () => {
  let t: TestApp;
  let registered: Set<string>;
  beforeAll(async () => {
    t = await startTestApp({ role: 'all' });
    const text = (await t.http().get('/metrics').expect(200)).text;
    registered = new Set<string>();
    for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      registered.add(name);
      if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) registered.add(name + suffix);
    }
  });
  afterAll(() => t?.close());

  it.each([
    ['alert rules', alertExpressions],
    ['Grafana dashboard', dashboardExpressions],
  ])('every series the %s name is one the service exports', (_what, expressions) => {
    const named = [...new Set(expressions().flatMap(seriesOf))];
    expect(named.length).toBeGreaterThan(5);
    expect(named.filter((name) => !registered.has(name))).toEqual([]);
  });

  it('alerts on unknown attempts, an open breaker, settlement races, disabled webhooks, 503s, backlog age and no primary', () => {
    const named = new Set(alertExpressions().flatMap(seriesOf));
    for (const series of [
      'onejob_attempts_unknown',
      'onejob_provider_breaker_state',
      'onejob_settlement_races_total',
      'onejob_webhook_endpoints_disabled_total',
      'onejob_http_request_duration_seconds_count',
      'onejob_oldest_due_job_age_seconds',
      'onejob_database_primary_up',
    ]) {
      expect(named).toContain(series);
    }
  });

  it('every Kubernetes object validates against its API schema', async () => {
    expect(documents.map((d) => d.object.kind).sort()).toEqual(
      expect.arrayContaining(['ConfigMap', 'Deployment', 'Deployment', 'HorizontalPodAutoscaler', 'Job']),
    );
    expect(documents.map((d) => d.object.kind)).toEqual(
      expect.arrayContaining(['NetworkPolicy', 'PodDisruptionBudget', 'PodDisruptionBudget', 'Secret', 'Service']),
    );
    expect(await validateManifests(documents)).toEqual([]);
  });

  it("the manifests' catalog and environment are ones the service accepts", () => {
    const configMaps = new Map(
      documents.filter((d) => d.object.kind === 'ConfigMap').map((d) => [d.object.metadata.name, d.object.data!]),
    );
    expect(() => validateCatalog(parse(configMaps.get('onejob-catalog')!['catalog.yaml']))).not.toThrow();
    // onejob's own Deployments (identity.example.yaml's client is another service's).
    for (const { object } of documents.filter(
      (d) => d.object.kind === 'Deployment' && d.file !== 'identity.example.yaml',
    )) {
      const env = Object.fromEntries(
        (object.spec!.template!.spec.containers[0].env ?? []).map((e) => [e.name, e.value]),
      );
      const parsed = parseEnv({
        ...configMaps.get('onejob-env'),
        ...env,
        DATABASE_URL: 'postgres://u:p@db:5432/onejob',
      });
      expect(parsed).toMatchObject({
        metricsPort: 9464,
        migrationsRun: false,
        catalogFile: '/etc/onejob/catalog.yaml',
      });
      expect(['api', 'worker']).toContain(parsed.role);
    }
  });

  it("the identity example's issuers are ones the service accepts, and its client's projected token is for onejob", () => {
    const example = documents.filter((d) => d.file === 'identity.example.yaml');
    const issuersYaml = example.find((d) => d.object.kind === 'ConfigMap')!.object.data!['issuers.yaml'];
    const { issuers } = validateIssuers(parse(issuersYaml), SCOPES);
    const cluster = issuers.find((i) => i.issuer.includes('kubernetes'))!;
    expect(cluster.owner).toEqual({
      template: 'k8s-{{kubernetes.io.namespace}}-{{kubernetes.io.serviceaccount.name}}',
    });
    const client = example.find((d) => d.object.kind === 'Deployment')!.object as unknown as {
      spec: { template: { spec: { volumes: Array<{ projected?: { sources: Array<Record<string, any>> } }> } } };
    };
    const projected = client.spec.template.spec.volumes.flatMap((v) => v.projected?.sources ?? []);
    const token = projected.find((s) => s.serviceAccountToken)!.serviceAccountToken;
    expect(token.audience).toBe(cluster.audience);
    expect(token.expirationSeconds).toBeLessThanOrEqual(86_400);
  });
});
