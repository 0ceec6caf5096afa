import { applyDecorators } from '@nestjs/common';
import { ApiBearerAuth, ApiOperation, ApiResponse } from '@nestjs/swagger';

const problemSchema = {
  type: 'object',
  required: ['type', 'title', 'status', 'detail', 'code', 'requestId'],
  properties: {
    type: { type: 'string', example: 'urn:onejob:problem:validation_failed' },
    title: { type: 'string' },
    status: { type: 'integer' },
    detail: { type: 'string' },
    instance: { type: 'string' },
    code: { type: 'string', description: 'Stable machine-readable code (docs/errors.md).' },
    requestId: { type: 'string' },
    errors: {
      type: 'array',
      maxItems: 20,
      items: { type: 'object', properties: { field: { type: 'string' }, message: { type: 'string' } } },
    },
    errorsOmitted: { type: 'integer', description: 'Field errors found beyond the 20 listed in `errors`.' },
  },
};

export interface ProblemAnswer {
  status: number;
  codes: string[];
}

/** One decorator per endpoint: summary, operationId (the method name), auth, and every problem answer. */
export function ApiEndpoint(options: { operationId: string; summary: string; description?: string; problems: ProblemAnswer[]; auth?: boolean }) {
  const decorators = [
    ApiOperation({ operationId: options.operationId, summary: options.summary, description: options.description }),
    ...options.problems.map((problem) =>
      ApiResponse({
        status: problem.status,
        description: `problem+json with code ${problem.codes.join(' | ')}`,
        content: { 'application/problem+json': { schema: problemSchema } },
      }),
    ),
  ];
  if (options.auth !== false) {
    decorators.push(ApiBearerAuth());
    if (!options.problems.some((p) => p.status === 401)) {
      decorators.push(
        ApiResponse({ status: 401, description: 'problem+json with code unauthorized', content: { 'application/problem+json': { schema: problemSchema } } }),
        ApiResponse({ status: 403, description: 'problem+json with code forbidden', content: { 'application/problem+json': { schema: problemSchema } } }),
      );
    }
  }
  return applyDecorators(...decorators);
}
