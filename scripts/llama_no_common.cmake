# Included by CMake after every project() of the llama-cpp-python build (CMAKE_PROJECT_INCLUDE, see
# scripts/install.sh). llama-cpp-python forces LLAMA_BUILD_COMMON on, but llama.cpp's common library (chat
# parsers, argument parsing, downloads) serves only its command-line tools and libmtmd, neither of which is
# built here (LLAVA_BUILD=OFF) or shipped in the Python package: switching it off halves the compile
# (2 cores: 97 s instead of 194 s) and leaves libllama's outputs unchanged (same logits for Gemma 3 270M).
if(PROJECT_NAME STREQUAL "llama.cpp")
  set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp's common library: not used by the Python bindings" FORCE)
endif()
