// The fake of both providers' batch APIs lives in bench/ so that `npm run bench` (compiled from bench/ only) can use
// it too; the tests import it from here, as they do the fake of direct calls.
export * from '../../bench/fake-batch.server.js';
