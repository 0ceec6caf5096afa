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

export const TERMINAL_STATUSES: readonly JobStatus[] = ['succeeded', 'failed', 'cancelled'];
