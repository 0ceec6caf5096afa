/** Provider API keys are read here, by the variable name the catalog gives, so no other code reads the environment. */
export function readSecret(variable: string): string | undefined {
  const value = process.env[variable];
  return value === undefined || value === '' ? undefined : value;
}
