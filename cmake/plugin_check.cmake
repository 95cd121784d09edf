# SPDX-License-Identifier: Apache-2.0
# plugin_check.cmake - run after an engine plugin is linked (cmake -P):
# every mlpd_ symbol the plugin leaves undefined must be one the mlpd
# executable exports (mlpd.dynlist), or dlopen would fail at run time with
# "undefined symbol". Also checks that the plugin exports its ops and ABI
# stamp. Arguments: -DPLUGIN=<file> -DDYNLIST=<file> -DNM=<nm> -DKIND=<kind>
foreach(v PLUGIN DYNLIST NM KIND)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "plugin_check.cmake: ${v} not set")
  endif()
endforeach()
file(STRINGS ${DYNLIST} lines REGEX "^[ \t]*mlpd[a-z0-9_]*;")
set(exported "")
foreach(l ${lines})
  string(REGEX REPLACE "[ \t;]" "" l "${l}")
  list(APPEND exported ${l})
endforeach()
execute_process(COMMAND ${NM} -D --format=posix ${PLUGIN}
  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D ${PLUGIN} failed")
endif()
string(REPLACE "\n" ";" out "${out}")
set(missing "")
set(have_ops OFF)
set(have_abi OFF)
foreach(l ${out})
  if(l MATCHES "^(mlpd[A-Za-z0-9_]*) U")
    list(FIND exported ${CMAKE_MATCH_1} i)
    if(i LESS 0)
      list(APPEND missing ${CMAKE_MATCH_1})
    endif()
  elseif(l MATCHES "^mlpd_engine_${KIND}_ops [DRdr] ")
    set(have_ops ON)
  elseif(l MATCHES "^mlpd_plugin_abi [DRdr] ")
    set(have_abi ON)
  endif()
endforeach()
if(missing)
  list(JOIN missing ", " m)
  message(FATAL_ERROR "${PLUGIN} imports ${m} from the daemon, which the "
    "mlpd executable does not export: add them to ${DYNLIST}")
endif()
if(NOT have_ops OR NOT have_abi)
  message(FATAL_ERROR "${PLUGIN} does not export mlpd_engine_${KIND}_ops "
    "and mlpd_plugin_abi (see daemon/plugin.map)")
endif()
