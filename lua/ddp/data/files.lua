-- ddp.data.files: the directory walks the datasets over files share
-- (ImageFolder's class folders, WebDataset's shard globs, the shard and
-- folder tools) and the folders the tools make: libc's opendir/readdir and
-- mkdir through the FFI, no C of our own.
local core = require "ddp.core"
local C, ffi = core.C, core.ffi
local ipairs = ipairs

core.add_lib_file(debug.getinfo(1, "S").source)

local M = {}

-- The directory listing, from libc under names of our own (as
-- ddp.checkpoint's): struct dirent as glibc and musl lay it out on 64-bit
-- Linux.
pcall(ffi.cdef, [[
typedef struct dl_files_dir dl_files_dir;
typedef struct { uint64_t d_ino; int64_t d_off; unsigned short d_reclen; unsigned char d_type; char d_name[256]; } dl_files_dirent;
dl_files_dir *dl_files_opendir(const char *path) __asm__("opendir");
dl_files_dirent *dl_files_readdir(dl_files_dir *d) __asm__("readdir");
int dl_files_closedir(dl_files_dir *d) __asm__("closedir");
char *dl_files_strerror(int errnum) __asm__("strerror");
int dl_files_mkdir(const char *path, unsigned int mode) __asm__("mkdir");
]])
local EEXIST = 17

-- files.list_dir(path) -> names, dirs: the names in a directory (not .
-- and ..), sorted by their bytes, and the set of those that are
-- directories (links to directories included, as os.walk(followlinks =
-- True) sees them); nil, the system's reason and errno when it cannot be
-- read.
function M.list_dir(path)
  local d = C.dl_files_opendir(path)
  if d == nil then
    local errno = ffi.errno()
    return nil, ffi.string(C.dl_files_strerror(errno)), errno
  end
  local names, dirs = {}, {}
  while true do
    local e = C.dl_files_readdir(d)
    if e == nil then break end
    local name = ffi.string(e.d_name)
    if name ~= "." and name ~= ".." then
      names[#names + 1] = name
      -- DT_DIR = 4; DT_UNKNOWN (0, some filesystems) and links (10): ask
      local t = e.d_type
      if t == 4 then
        dirs[name] = true
      elseif t == 0 or t == 10 then
        local sd = C.dl_files_opendir((path == "/" and "" or path) .. "/" .. name)
        if sd ~= nil then
          C.dl_files_closedir(sd)
          dirs[name] = true
        end
      end
    end
  end
  C.dl_files_closedir(d)
  table.sort(names)
  return names, dirs
end

-- files.write_atomic(path, chunks, op): the byte runs of chunks ({data, n}
-- each: a string or a pointer, and its length) as path's contents, through
-- the runtime's atomic writer (dl_file_*): fsynced, the old file's mode
-- kept, written through symbolic links; a failed write (a full disk,
-- ulimit -f) raises naming op and path and leaves the old file and no
-- temporary.
function M.write_atomic(path, chunks, op)
  local total = 0
  for _, c in ipairs(chunks) do total = total + c[2] end
  local f = C.dl_file_create(path, total, op)
  if f == nil then core.raise_c() end
  f = ffi.gc(f, C.dl_file_abort)  -- removes the temporary if an error escapes
  for _, c in ipairs(chunks) do
    if c[2] > 0 and C.dl_file_write(f, c[1], c[2]) ~= 0 then
      C.dl_file_abort(ffi.gc(f, nil))  -- now, not at the next collection
      core.raise_c()
    end
  end
  core.check(C.dl_file_commit(ffi.gc(f, nil)))
end

-- files.exists(path): whether path can be opened for reading.
function M.exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function is_dir(path)
  local d = C.dl_files_opendir(path)
  if d == nil then return false end
  C.dl_files_closedir(d)
  return true
end

-- files.make_dirs(path) -> true, or nil and the system's reason: path and
-- the folders above it made where missing (mkdir -p; mode 0777 less the
-- umask); a folder already there is fine, a file in the way is not.
function M.make_dirs(path)
  local at = 1
  while true do
    local slash = path:find("/", at + 1, true)
    local prefix = slash and path:sub(1, slash - 1) or path
    if prefix ~= "" and prefix ~= "." and C.dl_files_mkdir(prefix, 511) ~= 0 then
      local errno = ffi.errno()
      if errno ~= EEXIST then return nil, prefix .. ": " .. ffi.string(C.dl_files_strerror(errno)) end
      if not is_dir(prefix) then return nil, prefix .. ": exists and is not a folder" end
    end
    if not slash then return true end
    at = slash
  end
end

return M
