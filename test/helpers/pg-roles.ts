import { afterEach, inject } from 'vitest';
import { sql } from './postgres.js';

export interface Role {
  name: string;
  /** The database's address, logging in as this role. */
  url: string;
}

/**
 * Login roles for the tests of one file: a role belongs to the server, not to a test's database,
 * so each is dropped after its test. `grants` run as the superuser on the database, with `ROLE`
 * standing for the role's name.
 */
export function roleSuite(): { role(url: string, grants: string[]): Promise<Role> } {
  const made: { name: string; url: string }[] = [];
  afterEach(async () => {
    for (const { name, url } of made.splice(0)) {
      await sql(url, `DROP OWNED BY ${name}`).catch(() => {});
      await sql(inject('postgresUrl'), `DROP ROLE IF EXISTS ${name}`).catch(() => {});
    }
  });
  return {
    async role(url, grants) {
      const name = `role_${process.pid}_${Buffer.from(globalThis.crypto.getRandomValues(new Uint8Array(4))).toString('hex')}`;
      const password = 'role-s3cret-pw';
      await sql(inject('postgresUrl'), `CREATE ROLE ${name} LOGIN PASSWORD '${password}'`);
      made.push({ name, url });
      for (const grant of grants) await sql(url, grant.replaceAll('ROLE', name));
      const as = new URL(url);
      as.username = name;
      as.password = password;
      return { name, url: as.toString() };
    },
  };
}

/** What a role that may only read the store is given: CONNECT, and SELECT on enrich's tables. */
export const READ_ONLY = (url: string): string[] => [`GRANT CONNECT ON DATABASE ${new URL(url).pathname.slice(1)} TO ROLE`, 'GRANT SELECT ON ALL TABLES IN SCHEMA public TO ROLE'];
