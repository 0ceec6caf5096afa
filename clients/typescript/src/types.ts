import type { components, operations } from './schema.js';

type Schemas = components['schemas'];

/** A job with its attempts, as every job endpoint answers it. */
export type Job = Schemas['JobView'];
export type Attempt = Schemas['AttemptView'];
/** A job without its attempts, as listed. */
export type JobSummary = Schemas['JobSummaryView'];
export type JobPage = Schemas['JobPageView'];
export type JobStatus = Job['status'];
/** The intent: operation, input, and optionally the provider chain. */
export type CreateJobRequest = Schemas['CreateJobDto'];
export type Problem = Schemas['Problem'];
/** One row of a job's timeline, as the pages and the live stream carry it. */
export type JobEvent = Schemas['JobEventView'];
export type ListJobsQuery = NonNullable<operations['listJobs']['parameters']['query']>;

/** A batch with its progress: counts per job status, cost, completedAt once every job is terminal. */
export type Batch = Schemas['BatchView'];
/** The answer to createBatch: the batch and every item's outcome (created, replayed, conflict), in order. */
export type BatchCreated = Schemas['BatchCreatedView'];
export type BatchItem = Schemas['BatchItemView'];
export type BatchItemOutcome = BatchItem['outcome'];
export type BatchJobPage = Schemas['BatchJobPageView'];
export type BatchPage = Schemas['BatchPageView'];
/** One item of a batch: its job's key, operation, input and optionally the provider chain. */
export type CreateBatchItem = Schemas['CreateBatchItemDto'];
export type ListBatchJobsQuery = NonNullable<operations['listBatchJobs']['parameters']['query']>;
export type ListBatchesQuery = NonNullable<operations['listBatches']['parameters']['query']>;

export const TERMINAL_STATUSES: readonly JobStatus[] = ['succeeded', 'failed', 'cancelled'];
