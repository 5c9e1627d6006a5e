// The Vercel AI SDK reading one streamed answer from the gateway; prints {"text": ...}.
// node client.mjs DIALECT BASE_URL MODEL  (packages: tests/clients/js/package.json, `make test-clients`)
import { streamText } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createGoogleGenerativeAI } from "@ai-sdk/google";

const [dialect, base, modelName] = process.argv.slice(2);
const apiKey = "sk-test";
let model;
if (dialect === "openai-chat") model = createOpenAI({ baseURL: `${base}/v1`, apiKey }).chat(modelName);
else if (dialect === "openai-responses") model = createOpenAI({ baseURL: `${base}/v1`, apiKey }).responses(modelName);
else if (dialect === "anthropic-messages") model = createAnthropic({ baseURL: `${base}/v1`, apiKey })(modelName);
else if (dialect === "gemini") model = createGoogleGenerativeAI({ baseURL: `${base}/v1beta`, apiKey })(modelName);
else throw new Error(`unknown dialect ${dialect}`);

let failure = null;
const result = streamText({ model, prompt: "hi", maxRetries: 0, onError: ({ error }) => { failure = error; } });
let text = "";
for await (const delta of result.textStream) text += delta;
if (failure) { console.error(String(failure)); process.exit(1); }
console.log(JSON.stringify({ text }));
