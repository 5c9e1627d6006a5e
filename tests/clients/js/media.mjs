// The Vercel AI SDK asking the gateway for embeddings or images; prints one JSON line.
// node media.mjs embed DIALECT BASE_URL MODEL TEXT...  -> {"vectors": [[...], ...]}
// node media.mjs image DIALECT BASE_URL MODEL PROMPT   -> {"images": ["<base64>", ...]}
// (packages: tests/clients/js/package.json, `make clients`)
import { embedMany, generateImage } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createGoogleGenerativeAI } from "@ai-sdk/google";

const [what, dialect, base, modelName, ...rest] = process.argv.slice(2);
const apiKey = "sk-test";
const provider =
  dialect === "openai-chat" ? createOpenAI({ baseURL: `${base}/v1`, apiKey })
  : dialect === "gemini" ? createGoogleGenerativeAI({ baseURL: `${base}/v1beta`, apiKey })
  : null;
if (provider === null) throw new Error(`unknown dialect ${dialect}`);

try {
  if (what === "embed") {
    const { embeddings } = await embedMany({ model: provider.embedding(modelName), values: rest, maxRetries: 0 });
    console.log(JSON.stringify({ vectors: embeddings }));
  } else {
    // OpenAI: POST /images/generations; Google: a Gemini image model through generateContent
    // with IMAGE response modalities.
    const { images } = await generateImage({ model: provider.image(modelName), prompt: rest[0], maxRetries: 0 });
    console.log(JSON.stringify({ images: images.map((image) => image.base64) }));
  }
} catch (error) {
  console.error(String(error?.stack ?? error));
  process.exit(1);
}
