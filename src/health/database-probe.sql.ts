import { statement } from '../database/prepared-statements.js';

/** Readiness's question to the database (docs/sql/database-probe.sql): does it answer. */
export const PING = statement('ping', 'SELECT 1');
