// Validates Kubernetes objects against the API schemas of kubernetes-models (a dev dependency), by apiVersion and kind;
// CloudNativePG's custom resources against the JSON schemas of their CRD fields in cnpg-schema.mjs (ajv).
import Ajv from 'ajv';

import { CNPG_SCHEMAS } from './cnpg-schema.mjs';

const ajv = new Ajv({ allErrors: true, strict: true });
const custom = Object.fromEntries(Object.entries(CNPG_SCHEMAS).map(([type, schema]) => [type, ajv.compile(schema)]));
const MODELS = {
  'v1/ConfigMap': 'kubernetes-models/v1/ConfigMap',
  'v1/Secret': 'kubernetes-models/v1/Secret',
  'v1/Service': 'kubernetes-models/v1/Service',
  'apps/v1/Deployment': 'kubernetes-models/apps/v1/Deployment',
  'batch/v1/Job': 'kubernetes-models/batch/v1/Job',
  'policy/v1/PodDisruptionBudget': 'kubernetes-models/policy/v1/PodDisruptionBudget',
  'autoscaling/v2/HorizontalPodAutoscaler': 'kubernetes-models/autoscaling/v2/HorizontalPodAutoscaler',
  'networking.k8s.io/v1/NetworkPolicy': 'kubernetes-models/networking.k8s.io/v1/NetworkPolicy',
};
/** Read by kubectl (kustomize), not by the API server: no schema to check it against. */
const CLIENT_SIDE = new Set(['kustomize.config.k8s.io/v1beta1/Kustomization']);

/** Problems found in `documents` ({file, object}[]), one line each; empty when every object is valid. */
export async function validateManifests(documents) {
  const problems = [];
  for (const { file, object } of documents) {
    const type = `${object?.apiVersion}/${object?.kind}`;
    if (CLIENT_SIDE.has(type)) continue;
    const where = `${file}: ${type} ${object?.metadata?.name ?? '(no name)'}`;
    if (custom[type]) {
      const valid = custom[type];
      if (!valid(object)) {
        for (const e of valid.errors) {
          problems.push(`${where}: ${e.instancePath || '/'} ${e.message} ${JSON.stringify(e.params)}`);
        }
      }
      continue;
    }
    const module = MODELS[type];
    if (!module) {
      problems.push(
        `${where}: no schema known for this apiVersion and kind (add it to deploy/kubernetes-validate.mjs)`,
      );
      continue;
    }
    const Model = Object.values(await import(module))[0];
    try {
      new Model(object).validate();
    } catch (error) {
      problems.push(`${where}: ${error.message}`);
    }
  }
  return problems;
}
