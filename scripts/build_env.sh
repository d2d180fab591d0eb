# Sourced by scripts/setup, scripts/test and scripts/test-sanitize, from the
# repository root. Compiles through ccache when it is installed (scripts/setup
# installs it), keyed so that another clone of the repository reuses the
# objects of this one: paths under the clone are hashed relative to it
# (CCACHE_BASEDIR), the working directory is not hashed (CCACHE_NOHASHDIR),
# and the compiler sees no absolute path of the clone either (CMakeLists.txt
# maps the source tree to "." with -ffile-prefix-map). Sets claw_launcher to
# the CMake flags that do it (empty without ccache).
claw_launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=true
  claw_launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
