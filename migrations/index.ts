import { CreateSpine1795977300000 } from './1795977300000-CreateSpine.js';
import { CreateCertifications1795977400000 } from './1795977400000-CreateCertifications.js';
import { CreateAttempts1795977500000 } from './1795977500000-CreateAttempts.js';
import { OperatorSurface1795977800000 } from './1795977800000-OperatorSurface.js';
import { AddJobTraceContext1795978100000 } from './1795978100000-AddJobTraceContext.js';

/** Every migration, in order. Listed by class so the same list works from TypeScript sources and from dist/. */
export const migrations = [
  CreateSpine1795977300000,
  CreateCertifications1795977400000,
  CreateAttempts1795977500000,
  OperatorSurface1795977800000,
  AddJobTraceContext1795978100000,
];
