// The one fake OpenAI-compatible server lives in bench/ so that `npm run bench` (compiled from bench/ only) can use
// it too; the tests keep importing it from here.
export * from '../../bench/fake-openai.server.js';
