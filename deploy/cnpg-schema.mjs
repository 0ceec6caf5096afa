// CloudNativePG's Cluster and Pooler are custom resources: kubernetes-models has no schema for them. These JSON
// schemas hold the fields of their CRDs (postgresql.cnpg.io/v1) that deploy/kubernetes/postgres-cnpg.example.yaml
// uses, with the CRDs' types and enums, and refuse any other field: a typo or a field of another version fails
// `npm run deploy:check` instead of being dropped by the API server. What is not checked: fields this example does
// not use, and rules the operator's webhook enforces beyond the CRD's schema.
const quantity = { type: 'string', pattern: '^[0-9]+(\\.[0-9]+)?(Ki|Mi|Gi|Ti)?$' };
const stringMap = { type: 'object', additionalProperties: { type: 'string' } };
const metadata = {
  type: 'object',
  required: ['name'],
  properties: {
    name: { type: 'string', pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$' },
    namespace: { type: 'string' },
    labels: stringMap,
    annotations: stringMap,
  },
  additionalProperties: false,
};
const closed = (properties, required = []) => ({ type: 'object', properties, required, additionalProperties: false });

export const CNPG_SCHEMAS = {
  'postgresql.cnpg.io/v1/Cluster': closed(
    {
      apiVersion: { const: 'postgresql.cnpg.io/v1' },
      kind: { const: 'Cluster' },
      metadata,
      spec: closed(
        {
          instances: { type: 'integer', minimum: 1 },
          imageName: { type: 'string' },
          postgresql: closed({
            parameters: stringMap,
            synchronous: closed(
              {
                method: { enum: ['any', 'first'] },
                number: { type: 'integer', minimum: 1 },
                dataDurability: { enum: ['required', 'preferred'] },
                maxStandbyNamesFromCluster: { type: 'integer', minimum: 0 },
              },
              ['method', 'number'],
            ),
          }),
          primaryUpdateStrategy: { enum: ['unsupervised', 'supervised'] },
          primaryUpdateMethod: { enum: ['switchover', 'restart'] },
          bootstrap: closed({
            initdb: closed({
              database: { type: 'string' },
              owner: { type: 'string' },
              secret: closed({ name: { type: 'string' } }, ['name']),
            }),
          }),
          storage: closed({ size: quantity, storageClass: { type: 'string' } }),
          monitoring: closed({ enablePodMonitor: { type: 'boolean' } }),
        },
        ['instances'],
      ),
    },
    ['apiVersion', 'kind', 'metadata', 'spec'],
  ),
  'postgresql.cnpg.io/v1/Pooler': closed(
    {
      apiVersion: { const: 'postgresql.cnpg.io/v1' },
      kind: { const: 'Pooler' },
      metadata,
      spec: closed(
        {
          cluster: closed({ name: { type: 'string' } }, ['name']),
          instances: { type: 'integer', minimum: 0 },
          type: { enum: ['rw', 'ro', 'r'] },
          pgbouncer: closed({ poolMode: { enum: ['session', 'transaction'] }, parameters: stringMap }),
        },
        ['cluster', 'pgbouncer'],
      ),
    },
    ['apiVersion', 'kind', 'metadata', 'spec'],
  ),
};
