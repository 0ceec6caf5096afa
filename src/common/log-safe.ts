/**
 * What of an error may reach a log line. Logs are read by more people than the database is, so a line never
 * carries SQL, SQL parameters, job input or results, nor a credential a provider echoed back.
 */

const SECRET_PATTERNS: Array<[RegExp, string]> = [
  // Authorization schemes and key=value forms: keep the name, drop the value.
  [/\b(bearer|basic|token)\s+[^\s"',;]+/gi, '$1 [redacted]'],
  [
    /\b((?:api[_-]?key|x-api-key|access[_-]?token|secret|password|authorization)["']?\s*[:=]\s*["']?)[^\s"',;}]+/gi,
    '$1[redacted]',
  ],
  // Provider key shapes (sk-..., sk-ant-..., oj_...), then any long run of hex or base64-like characters.
  [/\b(?:sk|pk|rk|oj)[-_][A-Za-z0-9_-]{8,}/g, '[redacted]'],
  [/\b[A-Fa-f0-9]{32,}\b/g, '[redacted]'],
  [/[A-Za-z0-9+/_-]{32,}={0,2}/g, '[redacted]'],
];

/** Replaces anything that looks like a credential with `[redacted]`. */
export function redactSecrets(text: string): string {
  return SECRET_PATTERNS.reduce((out, [pattern, replacement]) => out.replace(pattern, replacement), text);
}

/** Identifiers PostgreSQL quotes in its messages; any other quoted text in a message is a value, and goes. */
const IDENTIFIER_BEFORE_QUOTE =
  /\b(?:relation|constraint|column|table|index|function|type|schema|database|role|sequence|trigger|operator)\s*$/i;

export function sanitizeMessage(message: string, max = 300): string {
  let out = '';
  let rest = message;
  for (let match = /"(?:[^"\\]|\\.)*"/.exec(rest); match; match = /"(?:[^"\\]|\\.)*"/.exec(rest)) {
    const before = rest.slice(0, match.index);
    out += before + (IDENTIFIER_BEFORE_QUOTE.test(before) ? match[0] : '"…"');
    rest = rest.slice(match.index + match[0].length);
  }
  out = redactSecrets(out + rest);
  return out.length > max ? `${out.slice(0, max)}…` : out;
}

export interface SafeErrorFields {
  errorClass: string;
  code?: string;
  error: string;
  stack?: string;
}

/** An error as a log line may show it: class, driver or SQLSTATE code, sanitized message, and code locations. */
export function safeErrorFields(error: unknown, options: { stack?: boolean } = {}): SafeErrorFields {
  if (!(error instanceof Error)) return { errorClass: typeof error, error: 'a non-Error value was thrown' };
  const driver = (error as { driverError?: { code?: unknown } }).driverError;
  const code = (error as { code?: unknown }).code ?? driver?.code;
  const fields: SafeErrorFields = {
    errorClass: error.constructor?.name ?? error.name,
    error: sanitizeMessage(error.message),
  };
  if (typeof code === 'string' || typeof code === 'number') fields.code = String(code);
  // The first line of a stack repeats the message: only the frames are kept.
  if (options.stack && error.stack) {
    fields.stack = error.stack
      .split('\n')
      .filter((line) => /^\s+at /.test(line))
      .slice(0, 15)
      .join('\n');
  }
  return fields;
}
