# The chat page of `k3 serve` (issue 16): the files below are embedded into k3_server at build
# time by embed.cmake (byte arrays in a generated web_assets.cpp) and served by web_page.cpp.
# Included from tools/server/CMakeLists.txt after k3_server is defined.
set(K3_WEB_FILES index.html app.js app.css)
set(K3_WEB_DIR ${CMAKE_CURRENT_LIST_DIR})
set(K3_WEB_GENERATED ${CMAKE_CURRENT_BINARY_DIR}/web_assets.cpp)
list(TRANSFORM K3_WEB_FILES PREPEND ${K3_WEB_DIR}/ OUTPUT_VARIABLE K3_WEB_PATHS)
list(JOIN K3_WEB_FILES "|" K3_WEB_FILES_ARG)
add_custom_command(
  OUTPUT ${K3_WEB_GENERATED}
  COMMAND ${CMAKE_COMMAND} -DWEB_DIR=${K3_WEB_DIR} -DOUT=${K3_WEB_GENERATED} -DFILES=${K3_WEB_FILES_ARG}
          -P ${K3_WEB_DIR}/embed.cmake
  DEPENDS ${K3_WEB_PATHS} ${K3_WEB_DIR}/embed.cmake
  COMMENT "Embedding the chat page (tools/server/web) into k3_server"
  VERBATIM)
target_sources(k3_server PRIVATE ${K3_WEB_DIR}/web_page.cpp ${K3_WEB_GENERATED})
target_include_directories(k3_server PRIVATE ${K3_WEB_DIR})
