# algorithm_files.cmake — which files of sim/rl/ are algorithms (sim/rl/registry.h): those with a
# line that starts `MOERL_REGISTER_ALGORITHM(<name>`. Used by sim/CMakeLists.txt and checked by
# tests/rl/algorithm_files_test.cmake.
#
# moerl_algorithm_files(<out_sources> <out_rows> <file>...): the files that register a row, and the
# rows' names, sorted.
function(moerl_algorithm_files out_sources out_rows)
  set(_sources)
  set(_rows)
  foreach(src ${ARGN})
    if(src MATCHES "/rl/[^/]+\\.cpp$")
      file(READ ${src} _text)
      string(REGEX MATCHALL "\nMOERL_REGISTER_ALGORITHM\\([a-z0-9_]+" _regs "\n${_text}")
      if(_regs)
        list(APPEND _sources ${src})
        foreach(reg ${_regs})
          string(REGEX REPLACE ".*\\(" "" _name "${reg}")
          list(APPEND _rows ${_name})
        endforeach()
      endif()
    endif()
  endforeach()
  list(SORT _rows)
  set(${out_sources} ${_sources} PARENT_SCOPE)
  set(${out_rows} ${_rows} PARENT_SCOPE)
endfunction()
