# The chat page of `k3 serve`: the files below are embedded into k3_server at build time by
# embed.cmake (byte arrays in a generated web_assets.cpp) and served by web_page.cpp.
# Included from tools/server/CMakeLists.txt after k3_server is defined.
set(K3_WEB_FILES index.html app.js app.css)
set(K3_WEB_DIR ${CMAKE_CURRENT_LIST_DIR})
set(K3_WEB_GENERATED ${CMAKE_CURRENT_BINARY_DIR}/web_assets.cpp)
list(TRANSFORM K3_WEB_FILES PREPEND ${K3_WEB_DIR}/ OUTPUT_VARIABLE K3_WEB_PATHS)

# The page's libraries, from Debian packages (scripts/setup.sh installs them), served at
# /vendor/<name> from this server: markdown (marked), its sanitizer (DOMPurify), code
# highlighting (highlight.js, the full language pack: Debian ships no core-only build), two
# highlight.js themes (light and dark), and math typesetting (KaTeX: its script, its stylesheet
# and, below, its fonts).
#   URL name               Debian package        path in the package
set(K3_WEB_VENDOR
  "vendor/marked.min.js"    libjs-marked        /usr/share/javascript/marked/marked.min.js
  "vendor/purify.min.js"    node-dompurify      /usr/share/nodejs/dompurify/dist/purify.min.js
  "vendor/highlight.min.js" libjs-highlight.js  /usr/share/javascript/highlight.js/highlight.min.js
  "vendor/hljs_light.css"   libjs-highlight.js  /usr/share/javascript/highlight.js/styles/github.css
  "vendor/hljs_dark.css"    libjs-highlight.js  /usr/share/javascript/highlight.js/styles/atom-one-dark.css
  "vendor/katex.min.js"     libjs-katex         /usr/share/javascript/katex/katex.min.js
  "vendor/katex.min.css"    libjs-katex         /usr/share/javascript/katex/katex.min.css)
# KaTeX's fonts, the woff2 files only (every browser that runs the page reads woff2; embed.cmake
# drops the woff and ttf sources from the stylesheet). The stylesheet names them
# url(fonts/<file>), relative to /vendor/katex.min.css: they are served at /vendor/fonts/<file>.
set(K3_WEB_KATEX_FONTS /usr/share/fonts/truetype/katex)
file(GLOB katex_fonts "${K3_WEB_KATEX_FONTS}/KaTeX_*.woff2")
if(NOT katex_fonts)
  message(FATAL_ERROR "The chat page needs KaTeX's fonts ${K3_WEB_KATEX_FONTS}/KaTeX_*.woff2, from the Debian "
                      "package fonts-katex: apt-get install fonts-katex (scripts/setup.sh installs it)")
endif()
foreach(font IN LISTS katex_fonts)
  get_filename_component(font_name "${font}" NAME)
  list(APPEND K3_WEB_VENDOR "vendor/fonts/${font_name}" fonts-katex "${font}")
endforeach()
set(K3_WEB_FILES_ARG ${K3_WEB_FILES})
list(LENGTH K3_WEB_VENDOR n_vendor)
math(EXPR last "${n_vendor} - 1")
foreach(i RANGE 0 ${last} 3)
  math(EXPR i_pkg "${i} + 1")
  math(EXPR i_path "${i} + 2")
  list(GET K3_WEB_VENDOR ${i} url_name)
  list(GET K3_WEB_VENDOR ${i_pkg} pkg)
  list(GET K3_WEB_VENDOR ${i_path} path)
  if(NOT EXISTS "${path}")
    message(FATAL_ERROR "The chat page needs ${path}, from the Debian package ${pkg}: "
                        "apt-get install ${pkg} (scripts/setup.sh installs it)")
  endif()
  file(REAL_PATH "${path}" real)  # Debian links marked.min.js to marked.umd.min.js
  list(APPEND K3_WEB_PATHS "${real}")
  list(APPEND K3_WEB_FILES_ARG "${url_name}=${real}")
endforeach()

list(JOIN K3_WEB_FILES_ARG "|" K3_WEB_FILES_ARG)
add_custom_command(
  OUTPUT ${K3_WEB_GENERATED}
  COMMAND ${CMAKE_COMMAND} -DWEB_DIR=${K3_WEB_DIR} -DOUT=${K3_WEB_GENERATED} -DFILES=${K3_WEB_FILES_ARG}
          -P ${K3_WEB_DIR}/embed.cmake
  DEPENDS ${K3_WEB_PATHS} ${K3_WEB_DIR}/embed.cmake
  COMMENT "Embedding the chat page (tools/server/web) and its libraries into k3_server"
  VERBATIM)
target_sources(k3_server PRIVATE ${K3_WEB_DIR}/web_page.cpp ${K3_WEB_GENERATED})
target_include_directories(k3_server PRIVATE ${K3_WEB_DIR})
