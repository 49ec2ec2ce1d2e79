-- encode_tokens.lua: writes a text file's bytes as a flat token file for
-- ddp.tokens.TokenDataset (byte-level: vocabulary 256, one token a byte),
-- headerless as nanoGPT's `.bin` or with llm.c's 1024-byte header.
--
--   ddplua tools/encode_tokens.lua input.txt out.bin [--dtype uint16|uint32] [--header none|llmc]
local ddp = require "ddp"
local tokens = require "ddp.tokens"

local args = ddp.argparse({ dtype = "uint16", header = "none" }, arg, {
  program = "ddplua tools/encode_tokens.lua",
  positional = { "input", "output" },
  help = { input = "a text file (any bytes)", output = "the token file to write",
           dtype = "uint16 (nanoGPT, llm.c's GPT-2 files) or uint32", header = "none (nanoGPT) or llmc (llm.c)" },
})
local n = tokens.encode_bytes(args.input, args.output, { dtype = args.dtype, header = args.header })
print(("%s: %d tokens (%s%s), vocabulary 256 (bytes)"):format(args.output, n, args.dtype,
  args.header == "llmc" and ", llm.c header" or ""))
