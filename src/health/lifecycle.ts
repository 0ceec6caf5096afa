import { type BeforeApplicationShutdown, Injectable } from '@nestjs/common';

/** Process-wide shutdown flag: readiness turns false and workers stop claiming as soon as SIGTERM arrives. */
@Injectable()
export class Lifecycle implements BeforeApplicationShutdown {
  shuttingDown = false;

  beforeApplicationShutdown(): void {
    this.shuttingDown = true;
  }
}
