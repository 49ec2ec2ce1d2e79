-- tests/golden/write_npy.lua: the .npy and .npz files ddplua writes for
-- NumPy to read back.  A function of the directory to write into:
--   dofile("tests/golden/write_npy.lua")(dir)
-- tests/golden/check_npy_roundtrip.py runs it into tests/golden/npy/ddplua/
-- and checks the files with numpy (values computed again in numpy from the
-- same formulas, header bytes against np.save's, every zip CRC); the files
-- are committed, and tests/npy_spec.lua checks that ddplua still writes
-- exactly these bytes.
local ddp = require "ddp"
local data = require "ddp.data"

-- name -> tensor; the formulas have numpy twins in check_npy_roundtrip.py
local function arrays()
  return {
    t_f32 = ddp.arange(12, { dtype = "float32" }):reshape(3, 4):t(),          -- column-major: fortran_order
    slice_i64 = ddp.arange(20, { dtype = "int64" }):reshape(4, 5):narrow(1, 1, 3),  -- neither order: C copy
    scalar_f64 = ddp.tensor(2.5, { dtype = "float64" }),
    empty_f32 = ddp.zeros(0, 3),
    even_bool = ddp.arange(6):fmod(2):eq(0),
    quarter_f16 = (ddp.arange(5, { dtype = "float32" }) / 4):to("float16"),
    u8 = ddp.arange(0, 256, 17, { dtype = "uint8" }),
    i32 = ddp.arange(-6, 6, { dtype = "int32" }):reshape(3, 4),
    big_i64 = ddp.tensor({ -2 ^ 62, 2 ^ 53 + 2, -1 }, { dtype = "int64" }),
  }
end

return function(dir)
  local a = arrays()
  local names = {}
  for name in pairs(a) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do data.save_npy(dir .. "/" .. name .. ".npy", a[name]) end
  -- np.savez(path, t_f32, slice_i64, scalar=..., ...)
  data.save_npz(dir .. "/arrays.npz", {
    a.t_f32, a.slice_i64,
    scalar = a.scalar_f64, empty = a.empty_f32, flags = a.even_bool, ["w\195\164rme"] = a.quarter_f16,
    u8 = a.u8, i32 = a.i32,
  })
  return names
end
