import { Inject, Injectable } from '@nestjs/common';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';

import type { FieldError } from '../common/domain.errors.js';
import { type AppConfig, appConfig } from '../config/app.config.js';
import { fieldPath, loadCatalog } from '../config/catalog.loader.js';
import type { Catalog, OperationSpec, ProviderSpec } from '../config/catalog.types.js';

export const CATALOG = Symbol('CATALOG');

export function ajvErrors(errors: ErrorObject[] | null | undefined, root: string): FieldError[] {
  return (errors ?? []).map((error) => {
    const extra =
      error.keyword === 'required'
        ? `.${error.params.missingProperty}`
        : error.keyword === 'additionalProperties'
          ? `.${error.params.additionalProperty}`
          : '';
    const path = fieldPath(error.instancePath);
    return {
      field: `${root}${path ? (path.startsWith('[') ? path : `.${path}`) : ''}${extra}`,
      message: error.message ?? 'is invalid',
    };
  });
}

/** The validated catalog with each operation's schemas compiled once. */
@Injectable()
export class CatalogService {
  private readonly operations = new Map<string, OperationSpec>();
  private readonly providers = new Map<string, ProviderSpec>();
  private readonly inputValidators = new Map<string, ValidateFunction>();
  private readonly outputValidators = new Map<string, ValidateFunction>();

  constructor(@Inject(CATALOG) readonly catalog: Catalog) {
    const ajv = new Ajv({ strict: false, allErrors: true });
    for (const provider of catalog.providers) this.providers.set(provider.name, provider);
    for (const operation of catalog.operations) {
      this.operations.set(operation.name, operation);
      this.inputValidators.set(operation.name, ajv.compile(operation.inputSchema));
      this.outputValidators.set(operation.name, ajv.compile(operation.outputSchema));
    }
  }

  operation(name: string): OperationSpec | undefined {
    return this.operations.get(name);
  }

  provider(name: string): ProviderSpec | undefined {
    return this.providers.get(name);
  }

  listOperations(): OperationSpec[] {
    return [...this.operations.values()];
  }

  listProviders(): ProviderSpec[] {
    return [...this.providers.values()];
  }

  /** Field errors of `input` against the operation's input schema; empty when it passes. */
  inputErrors(operation: string, input: unknown): FieldError[] {
    const validate = this.inputValidators.get(operation)!;
    return validate(input) ? [] : ajvErrors(validate.errors, 'input');
  }

  /** Field errors of a provider's output against the operation's output schema; empty when it keeps the contract. */
  outputErrors(operation: string, output: unknown): FieldError[] {
    const validate = this.outputValidators.get(operation)!;
    return validate(output) ? [] : ajvErrors(validate.errors, 'output');
  }
}

export const catalogProvider = {
  provide: CATALOG,
  inject: [appConfig.KEY],
  useFactory: (config: AppConfig): Catalog => loadCatalog(config.catalogFile),
};
