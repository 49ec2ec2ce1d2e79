-- ddp.hf against transformers 5 (tests/golden/make_hf.py wrote the model
-- folders under tests/golden/hf/ and their logits): GPT-2 and Llama-style
-- folders load with logits within 1e-4 of transformers' (single files,
-- shards, untied and tied heads, llama3 RoPE, GQA, bfloat16 weights); the
-- layouts and fields it does not know are refused by name; save_pretrained
-- writes what transformers writes, and transformers loads it back with the
-- same logits (tests/helpers/hf_check.py, in the golden venv); nn.RMSNorm
-- against torch's rms_norm; a tied head stays tied through model:to.
local ddp = require "ddp"
local hf = ddp.hf
local json = require "ddp.data.json"
local shell = require "helpers.shell"
local jobs = require "helpers.jobs"
local q, sh = shell.q, shell.sh

local GOLD = "tests/golden/hf/"
local E = ddp.load(GOLD .. "expected.safetensors")
local MODELS = { "gpt2", "gpt2_sharded", "llama", "llama3_bf16" }

local function err_of(f, ...)
  local ok, e = pcall(f, ...)
  assert.is_false(ok, "expected an error")
  return tostring(e)
end

local function max_diff(a, b) return (a:double() - b:double()):abs():max():item() end

-- A copy of a golden folder to change.
local function copy_of(name)
  local dir = shell.tempdir()
  sh("cp -r " .. q(GOLD .. name) .. "/. " .. q(dir))
  return dir
end

local function edit_config(dir, f)
  local path = dir .. "/config.json"
  local c = json.decode(shell.slurp(path))
  f(c)
  shell.writefile(path, json.encode(c))
end

describe("hf.from_pretrained", function()
  for _, name in ipairs(MODELS) do
    it(name .. ": logits and loss within 1e-4 of transformers'", function()
      local model = hf.from_pretrained(GOLD .. name, { dtype = "float32" })
      assert.is_false(model.training)  -- eval mode, as transformers returns it
      local ids = E[name .. ".ids"]
      local logits, loss = model(ids, ids)
      assert.is_true(max_diff(logits, E[name .. ".logits"]) < 1e-4, name .. ": " .. max_diff(logits, E[name .. ".logits"]))
      assert.is_true(math.abs(loss:item() - E[name .. ".loss"]:item()) < 1e-4)
    end)
  end

  it("takes the config's dtype by default, ties the head to the embedding, and keeps it tied through :to", function()
    local m = hf.from_pretrained(GOLD .. "llama3_bf16")
    assert.equal("bfloat16", m.lm_head.weight:dtype())
    assert.is_true(m.lm_head.weight:is(m.model.embed_tokens.weight))
    local g = hf.from_pretrained(GOLD .. "gpt2")
    assert.equal("float32", g.lm_head.weight:dtype())
    assert.is_true(g.lm_head.weight:is(g.transformer.wte.weight))
    assert.is_false(hf.from_pretrained(GOLD .. "gpt2_sharded").lm_head.weight:is(g.transformer.wte.weight))
    g:to("float64")
    assert.is_true(g.lm_head.weight:is(g.transformer.wte.weight))
    assert.equal("float64", g.lm_head.weight:dtype())
    -- bfloat16 compute stays near float32's
    local ids = E["llama3_bf16.ids"]
    local want = E["llama3_bf16.logits"]
    assert.is_true(max_diff(m(ids), want) < 0.05 * want:abs():max():item())
  end)

  it("reads a base model's file without the body prefix, and old buffers", function()
    local dir = shell.tempdir()
    local t = ddp.load(GOLD .. "gpt2/model.safetensors")
    local bare = {}
    for k, v in pairs(t) do bare[(k:gsub("^transformer%.", ""))] = v end
    bare["h.0.attn.bias"] = ddp.ones(1, 1, 24, 24)
    ddp.save(bare, dir .. "/model.safetensors", { format = "pt" })
    sh("cp " .. q(GOLD .. "gpt2/config.json") .. " " .. q(dir))
    local ids = E["gpt2.ids"]
    assert.is_true(max_diff(hf.from_pretrained(dir)(ids), E["gpt2.logits"]) < 1e-4)
  end)

  it("refuses what it does not know, by name", function()
    local function refuses(pattern, edit, name)
      local dir = copy_of(name or "gpt2")
      edit(dir)
      local e = err_of(hf.from_pretrained, dir)
      assert.truthy(e:find(pattern), e)
      assert.truthy(e:find("hf_spec.lua:%d+:"), "not at the caller's line: " .. e)
    end
    refuses('model_type "bert" is not supported %(supported: gpt2, llama%)', function(d)
      edit_config(d, function(c) c.model_type = "bert" end) end)
    refuses('architecture "GPT2ForSequenceClassification" is not supported', function(d)
      edit_config(d, function(c) c.architectures = { "GPT2ForSequenceClassification" } end) end)
    refuses('activation_function = "quick_gelu" is not supported', function(d)
      edit_config(d, function(c) c.activation_function = "quick_gelu" end) end)
    refuses("add_cross_attention = true", function(d)
      edit_config(d, function(c) c.add_cross_attention = true end) end)
    refuses('rope_type "yarn" is not supported', function(d)
      edit_config(d, function(c) c.rope_parameters = { rope_type = "yarn", rope_theta = 10000, factor = 2 } end) end, "llama")
    refuses("the field n_head must be a positive integer", function(d)
      edit_config(d, function(c) c.n_head = "4" end) end)
    refuses("has no config.json", function(d) os.remove(d .. "/config.json") end)
    refuses("pytorch_model.bin, PyTorch's pickle format", function(d)
      os.remove(d .. "/model.safetensors")
      shell.writefile(d .. "/pytorch_model.bin", "x")
    end)
    local function weights(edit)
      return function(d)
        local t = ddp.load(d .. "/model.safetensors")
        edit(t)
        ddp.save(t, d .. "/model.safetensors")
      end
    end
    refuses("missing keys: transformer.h.1.ln_2.bias", weights(function(t) t["transformer.h.1.ln_2.bias"] = nil end))
    refuses("unexpected keys: score.weight", weights(function(t) t["score.weight"] = ddp.zeros(2, 32) end))
    refuses("shape mismatch: transformer.h.0.attn.c_proj.weight %(checkpoint %[32, 16%], model %[32, 32%]%)",
            weights(function(t) t["transformer.h.0.attn.c_proj.weight"] = ddp.zeros(32, 16) end))
    refuses("lists model%-00002%-of%-00012.safetensors, which is missing", function(d)
      os.remove(d .. "/model-00002-of-00012.safetensors") end, "gpt2_sharded")
    refuses("not a .safetensors file of the same folder", function(d)
      local path = d .. "/model.safetensors.index.json"
      local idx = json.decode(shell.slurp(path))
      idx.weight_map["lm_head.weight"] = "../model-00012-of-00012.safetensors"
      shell.writefile(path, json.encode(idx))
    end, "gpt2_sharded")
    assert.truthy(err_of(hf.from_pretrained, GOLD .. "gpt2", { dtyp = "float32" }):find("unknown option \"dtyp\""))
    assert.truthy(err_of(hf.LlamaForCausalLM.from_pretrained, GOLD .. "gpt2"):find("holds a GPT2LMHeadModel, not a LlamaForCausalLM"))
  end)

  it("checks the inputs and the labels", function()
    local m = hf.from_pretrained(GOLD .. "gpt2")
    assert.truthy(err_of(m, ddp.zeros(2, 4)):find("input_ids must be an int64 tensor %[batch, tokens%], got float32"))
    assert.truthy(err_of(m, ddp.zeros(1, 30, { dtype = "int64" })):find("longer than n_positions = 24"))
    local ids = E["gpt2.ids"]
    assert.truthy(err_of(m, ids, ids:narrow(1, 0, 4)):find("labels %[2, 4%] do not match input_ids %[2, 12%]"))
    -- -100 labels are left out, as transformers' loss leaves them
    local masked = ids:clone()
    masked:narrow(1, 6, 6):fill_(-100)
    local logits, loss = m(ids, masked)
    local want = ddp.nn.functional.cross_entropy(logits:narrow(1, 0, 5):reshape(10, 96), ids:narrow(1, 1, 5):reshape(10))
    assert.is_true(math.abs(loss:item() - want:item()) < 1e-6)
  end)
end)

describe("hf.save_pretrained", function()
  it("writes what transformers writes: the same tensor names and shapes, metadata format pt, no tied head", function()
    for _, name in ipairs { "gpt2", "llama" } do
      local dir = shell.tempdir() .. "/out"
      local written = hf.from_pretrained(GOLD .. name):save_pretrained(dir)
      assert.same({ "model.safetensors", "config.json" }, written)
      local ours, meta = ddp.load(dir .. "/model.safetensors")
      local theirs = ddp.load(GOLD .. name .. "/model.safetensors")
      assert.equal("pt", meta.format)
      for k, t in pairs(theirs) do
        assert.truthy(ours[k], name .. ": " .. k .. " not saved")
        assert.same(t:shape(), ours[k]:shape())
        assert.is_true(t:equal(ours[k]), k)
      end
      for k in pairs(ours) do assert.truthy(theirs[k], name .. ": " .. k .. " saved, transformers has no such key") end
      local c = json.decode(shell.slurp(dir .. "/config.json"))
      local g = json.decode(shell.slurp(GOLD .. name .. "/config.json"))
      for k, v in pairs(g) do
        if k ~= "transformers_version" and k ~= "generation_config" then assert.same(v, c[k], name .. ": config " .. k) end
      end
    end
  end)

  it("shards with an index, then replaces the shards with one file, and round-trips exactly", function()
    local dir = shell.tempdir()
    local m = hf.from_pretrained(GOLD .. "llama")
    local written = hf.save_pretrained(m, dir, { max_shard_size = "10KB" })
    local idx = json.decode(shell.slurp(dir .. "/model.safetensors.index.json"))
    local n = 0
    for _, p in m:named_parameters() do n = n + p:numel() end
    assert.equal(n * 4, idx.metadata.total_size)
    local shards = tonumber(sh("ls " .. q(dir) .. " | grep -c '^model-'"))
    assert.is_true(shards > 1)
    assert.equal(shards + 2, #written)  -- and the index and config.json
    local ids = E["llama.ids"]
    assert.is_true(hf.from_pretrained(dir)(ids):equal(m(ids)))
    hf.save_pretrained(m, dir)
    assert.equal("config.json\nmodel.safetensors\n", sh("ls " .. q(dir)))
    assert.is_true(hf.from_pretrained(dir)(ids):equal(m(ids)))
    assert.truthy(err_of(hf.save_pretrained, m, dir, { max_shard_size = "5 parsecs" }):find("max_shard_size must be"))
    assert.truthy(err_of(hf.save_pretrained, ddp.nn.Linear(2, 2), dir):find("expected a ddp.hf model.*got Linear"))
  end)

  it("is written once by rank 0 from a DDP job, and loads back on every rank", function()
    local dir = shell.tempdir()
    local script = jobs.script(([[
local hf = ddp.hf
ddp.init()
local model = ddp.DDP(hf.from_pretrained(%q):train())
local opt = ddp.optim.AdamW(model:parameters(), { lr = 1e-2 })
local ids = ddp.arange(24):remainder(96):view(2, 12)
local _, loss = model(ids, ids)
loss:backward(); opt:step()
local written = hf.save_pretrained(model, %q)
ddp.barrier()
local back = hf.from_pretrained(%q)
model:eval()
print(("rank %%d wrote %%d files, same logits %%s"):format(ddp.rank(), #written, tostring(back(ids):equal(model.module(ids)))))
]]):format(GOLD .. "gpt2", dir, dir), "hf_ddp")
    local out, err, rc = jobs.run("--nproc 2 " .. q(script), nil, 120)
    assert.equal(0, rc, out .. err)
    assert.truthy(out:find("rank 0 wrote 2 files, same logits true", 1, true), out .. err)
    assert.truthy(out:find("rank 1 wrote 0 files, same logits true", 1, true), out .. err)
  end)
end)

-- transformers' own loader on ddplua's folders: in the golden venv
-- (scripts/py-venv.sh: torch and transformers from PyPI), made where
-- missing only when the venv (5 GB of torch) is already there.
describe("transformers", function()
  local venv = (os.getenv("DDPLUA_VENV") or ((os.getenv("XDG_CACHE_HOME") or (os.getenv("HOME") .. "/.cache")) .. "/ddplua/venv"))
  local have = shell.exists(venv .. "/bin/python")
  local py
  local function python()
    if py then return py end
    local out = sh("bash scripts/py-venv.sh 2>&1")
    py = out:match("([^\n]*/bin/python)%s*$")
    assert(py, "scripts/py-venv.sh failed:\n" .. out)
    return py
  end
  local runs = have and it or pending
  runs((have and "" or ("SKIP: the golden venv " .. venv .. " (torch from PyPI, ~5 GB) is not built here "
       .. "(bash scripts/py-venv.sh): ")) .. "loads ddplua's folders with the logits ddplua computes", function()
    local function check(model, name, opts)
      local dir = shell.tempdir() .. "/" .. name
      hf.save_pretrained(model, dir, opts)
      local f32 = hf.from_pretrained(dir, { dtype = "float32" })
      local ids = ddp.arange(20):remainder(60):view(2, 10)
      local expect = shell.tempname() .. ".safetensors"
      ddp.save({ ids = ids, logits = f32(ids):contiguous() }, expect)
      local out = sh(q(python()) .. " tests/helpers/hf_check.py " .. q(dir) .. " " .. q(expect) .. " 2>&1")
      local ok, r = pcall(json.decode, out:match("([^\n]+)%s*$") or "")
      assert(ok, name .. ": hf_check.py: " .. out)
      assert.equal(model.__name, r.class)
      assert.same({}, r.missing); assert.same({}, r.unexpected); assert.same({}, r.mismatched)
      assert.equal(model.lm_head.weight:dtype(), r.default_dtype)
      assert.is_true(r.max_abs_diff < 1e-4, name .. ": " .. r.max_abs_diff)
      return r
    end
    -- a trained step, so the weights are ddplua's
    local g = hf.from_pretrained(GOLD .. "gpt2"):train()
    local opt = ddp.optim.AdamW(g:parameters(), { lr = 1e-2 })
    local ids = ddp.arange(24):remainder(96):view(2, 12)
    local _, loss = g(ids, ids)
    loss:backward(); opt:step()
    assert.is_true(check(g:eval(), "gpt2").tied)
    assert.is_false(check(hf.from_pretrained(GOLD .. "gpt2_sharded"), "gpt2_sharded", { max_shard_size = "10KB" }).tied)
    assert.is_true(check(hf.from_pretrained(GOLD .. "llama3_bf16"), "llama3_bf16", { max_shard_size = "16KB" }).tied)
    -- fresh models from configs of a few fields (transformers' defaults for the rest)
    check(hf.LlamaForCausalLM({ vocab_size = 60, hidden_size = 32, intermediate_size = 40, num_hidden_layers = 1,
                                num_attention_heads = 4, num_key_value_heads = 2 }), "fresh_llama")
    check(hf.GPT2LMHeadModel({ vocab_size = 60, n_positions = 16, n_embd = 16, n_layer = 1, n_head = 2 }), "fresh_gpt2")
  end)
end)

describe("nn.RMSNorm", function()
  local F = ddp.nn.functional
  local cases = { { "rms_f32", { 5 }, nil, 1e-6 }, { "rms_f64", { 4, 5 }, 1e-5, 1e-12 }, { "rms_eps", { 8 }, 0.5, 1e-6 },
                  { "rms_bf16", { 16 }, nil, 2 ^ -7 } }
  for _, c in ipairs(cases) do
    it(c[1] .. ": output and gradients as torch's rms_norm", function()
      local n, tol = c[1], c[4]
      local x = E[n .. ".x"]:clone():requires_grad_()
      local w = E[n .. ".w"] and E[n .. ".w"]:clone():requires_grad_()
      local out = F.rms_norm(x, c[2], w, c[3])
      assert.equal(E[n .. ".out"]:dtype(), out:dtype())
      ;(out:float() * E[n .. ".up"]:float()):sum():backward()
      local function close(a, b) return ((a:double() - b:double()):abs() - b:double():abs():mul(tol)):max():item() <= tol end
      assert.is_true(close(out, E[n .. ".out"]), n .. " out")
      assert.is_true(close(x.grad, E[n .. ".grad_x"]), n .. " grad x")
      if w then assert.is_true(close(w.grad, E[n .. ".grad_w"]), n .. " grad w") end
    end)
  end
  it("prints as torch's and names a shape that does not fit", function()
    assert.equal("RMSNorm((4,), eps=None, elementwise_affine=True)", tostring(ddp.nn.RMSNorm(4)))
    assert.equal("RMSNorm((2, 3), eps=1e-05, elementwise_affine=False)",
                 tostring(ddp.nn.RMSNorm({ 2, 3 }, { eps = 1e-5, elementwise_affine = false })))
    assert.truthy(err_of(ddp.nn.RMSNorm(4), ddp.randn(2, 3)):find("normalized_shape %[4%] does not match the last dims of the input %[2, 3%]"))
    assert.truthy(err_of(ddp.nn.RMSNorm, 4, { epsilon = 1 }):find("unknown option \"epsilon\""))
  end)
end)
