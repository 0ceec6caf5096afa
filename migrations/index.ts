import { CreateSpine1795977300000 } from './1795977300000-CreateSpine.js';
import { CreateCertifications1795977400000 } from './1795977400000-CreateCertifications.js';
import { CreateAttempts1795977500000 } from './1795977500000-CreateAttempts.js';
import { OperatorSurface1795977800000 } from './1795977800000-OperatorSurface.js';
import { CreateWebhooks1795977900000 } from './1795977900000-CreateWebhooks.js';
import { AllowRetentionPurge1795977910000 } from './1795977910000-AllowRetentionPurge.js';
import { AddAttemptCost1795977920000 } from './1795977920000-AddAttemptCost.js';
import { CreateOwnerBudgets1795977930000 } from './1795977930000-CreateOwnerBudgets.js';
import { AddJobTraceContext1795978100000 } from './1795978100000-AddJobTraceContext.js';
import { CreateProviderCapacity1795978200000 } from './1795978200000-CreateProviderCapacity.js';
import { AddJobBudgetReservation1795978300000 } from './1795978300000-AddJobBudgetReservation.js';
import { AddBudgetsScope1795978310000 } from './1795978310000-AddBudgetsScope.js';
import { WebhookPreviousSecrets1795978450000 } from './1795978450000-WebhookPreviousSecrets.js';
import { WebhookDeliveryLease1795978460000 } from './1795978460000-WebhookDeliveryLease.js';
import { CreateBatches1795978600000 } from './1795978600000-CreateBatches.js';
import { AddJobPriority1795978700000 } from './1795978700000-AddJobPriority.js';
import { CreateOwnerShares1795978710000 } from './1795978710000-CreateOwnerShares.js';
import { TrackProviderResponses1795978800000 } from './1795978800000-TrackProviderResponses.js';
import { ProviderAnnouncements1795978810000 } from './1795978810000-ProviderAnnouncements.js';
import { TokenPrincipals1795978950000 } from './1795978950000-TokenPrincipals.js';
import { IndexJobsCompletedBy1795979300000 } from './1795979300000-IndexJobsCompletedBy.js';
import { KeepPurgedUsage1795979400000 } from './1795979400000-KeepPurgedUsage.js';
import { NameConflictingJobs1795979510000 } from './1795979510000-NameConflictingJobs.js';
import { CountBatchMembers1795979520000 } from './1795979520000-CountBatchMembers.js';
import { IndexAttemptsInFlight1795979537000 } from './1795979537000-IndexAttemptsInFlight.js';
import { CreateOwnerQueue1795979600000 } from './1795979600000-CreateOwnerQueue.js';

/** Every migration, in order. Listed by class so the same list works from TypeScript sources and from dist/. */
export const migrations = [
  CreateSpine1795977300000,
  CreateCertifications1795977400000,
  CreateAttempts1795977500000,
  OperatorSurface1795977800000,
  CreateWebhooks1795977900000,
  AllowRetentionPurge1795977910000,
  AddAttemptCost1795977920000,
  CreateOwnerBudgets1795977930000,
  AddJobTraceContext1795978100000,
  CreateProviderCapacity1795978200000,
  AddJobBudgetReservation1795978300000,
  AddBudgetsScope1795978310000,
  WebhookPreviousSecrets1795978450000,
  WebhookDeliveryLease1795978460000,
  CreateBatches1795978600000,
  AddJobPriority1795978700000,
  CreateOwnerShares1795978710000,
  TrackProviderResponses1795978800000,
  ProviderAnnouncements1795978810000,
  TokenPrincipals1795978950000,
  IndexJobsCompletedBy1795979300000,
  KeepPurgedUsage1795979400000,
  NameConflictingJobs1795979510000,
  CountBatchMembers1795979520000,
  IndexAttemptsInFlight1795979537000,
  CreateOwnerQueue1795979600000,
];
