import { ConfigType, registerAs } from '@nestjs/config';

import { parseEnv } from './env.js';

/** The typed application configuration, read from the process environment once. */
export const appConfig = registerAs('app', () => parseEnv(process.env));
export type AppConfig = ConfigType<typeof appConfig>;

/** For code that runs outside Nest (CLIs, main.ts before the app exists). */
export function loadEnv() {
  return parseEnv(process.env);
}
