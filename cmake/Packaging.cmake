# The Debian package, built by CPack:
#
#   cmake -S . -B build-pkg -G Ninja -DCMAKE_INSTALL_PREFIX=/usr \
#     -DCONVEYOR_BUILD_TESTS=OFF -DCONVEYOR_BUILD_BENCHMARKS=OFF
#   cmake --build build-pkg --target package    # or: cd build-pkg && cpack
#
# gives build-pkg/conveyor_<version>_<arch>.deb: everything `cmake --install`
# installs, under /usr (the command in /usr/bin, the plugins in
# /usr/lib/conveyor/plugins, where /usr/bin/conveyor looks for them:
# <bin>/../lib/conveyor/plugins), plus what only the package installs:
#
#   /etc/conveyor/conveyor.toml                a conffile: config/conveyor.toml
#                                              with SQLite at
#                                              /var/lib/conveyor/conveyor.db
#   /usr/lib/systemd/system/conveyor.service   packaging/conveyor.service
#
# and packaging/postinst, prerm, postrm (the conveyor system user, the data
# directory /var/lib/conveyor, the service's enablement). Runtime library
# dependencies come from dpkg-shlibdeps. packaging/test-deb.sh installs a
# built package and checks it; docs/operations.md says how to run it.
#
# Included last from the top-level CMakeLists.txt: the component list below
# is read once every install rule exists.

set(conveyor_packaging_dir ${PROJECT_SOURCE_DIR}/packaging)
set(conveyor_deb_dir ${PROJECT_BINARY_DIR}/packaging)

# ---- files only the package installs ----
# In their own component, left out of a plain `cmake --install` (which must
# not write /etc or the systemd directory of a --prefix install); CPack
# installs every component into the one package.
#
# The package's config is the repository's default with the database moved
# into the data directory, so the two cannot drift apart.
file(READ ${PROJECT_SOURCE_DIR}/config/conveyor.toml conveyor_deb_config)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/config/conveyor.toml)
string(REGEX MATCH "\npath = \"[^\"\n]*\"[^\n]*" conveyor_deb_config_path_line "${conveyor_deb_config}")
if(NOT conveyor_deb_config_path_line)
  message(FATAL_ERROR "cmake/Packaging.cmake: config/conveyor.toml has no line 'path = \"...\"' "
                      "(the SQLite database of [storage.options]) to point at "
                      "/var/lib/conveyor/conveyor.db for the package's /etc/conveyor/conveyor.toml")
endif()
string(REPLACE "${conveyor_deb_config_path_line}"
       "\npath = \"/var/lib/conveyor/conveyor.db\"  # the package's data directory, owned by conveyor"
       conveyor_deb_config "${conveyor_deb_config}")
string(PREPEND conveyor_deb_config
       "# /etc/conveyor/conveyor.toml, installed by the conveyor package: a conffile (an\n"
       "# upgrade keeps your edits and asks before replacing them). conveyor.service runs\n"
       "# `conveyor serve --config /etc/conveyor/conveyor.toml` as the user conveyor.\n"
       "# The pristine default is /usr/share/conveyor/conveyor.toml.\n#\n")
file(CONFIGURE OUTPUT ${conveyor_deb_dir}/conveyor.toml CONTENT "${conveyor_deb_config}" @ONLY)

install(FILES ${conveyor_deb_dir}/conveyor.toml
        DESTINATION /etc/conveyor
        COMPONENT conveyor-deb EXCLUDE_FROM_ALL)
install(FILES ${conveyor_packaging_dir}/conveyor.service
        DESTINATION lib/systemd/system
        COMPONENT conveyor-deb EXCLUDE_FROM_ALL)

# ---- CPack ----
set(CONVEYOR_PACKAGE_MAINTAINER "Conveyor maintainers <conveyor@localhost>"
    CACHE STRING "Maintainer field of the Debian package")
if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "Packaging: the package installs under /usr; configure with "
                 "-DCMAKE_INSTALL_PREFIX=/usr so its libdir is ${CMAKE_LIBRARY_ARCHITECTURE} "
                 "multiarch (now ${CMAKE_INSTALL_PREFIX}: libdir '${CMAKE_INSTALL_LIBDIR}')")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME conveyor)
set(CPACK_PACKAGE_VENDOR "Conveyor")
set(CPACK_PACKAGE_CONTACT "${CONVEYOR_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "durable background-job queue with per-queue rate limits")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Executables and plugins lose their symbols (CPACK_STRIP_FILES); the static
# libraries only their debug information, as dh_strip does (in a
# RelWithDebInfo build it is nine tenths of libconveyor_core.a).
set(CPACK_STRIP_FILES ON)
set(CPACK_CONVEYOR_STRIP "${CMAKE_STRIP}")
set(CPACK_PRE_BUILD_SCRIPTS ${conveyor_packaging_dir}/strip-static-libraries.cmake)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR})

# Every component (the unnamed one of the install rules and conveyor-deb)
# in one package.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
get_cmake_property(CPACK_COMPONENTS_ALL COMPONENTS)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # conveyor_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The extended description, below the summary line.
string(CONCAT CPACK_DEBIAN_PACKAGE_DESCRIPTION
       "Conveyor runs background jobs from durable queues, each of which may carry\n"
       "a token-bucket rate limit. Storage is a plugin loaded at run time (SQLite,\n"
       "PostgreSQL). This package has the conveyor command, its storage plugins,\n"
       "the conveyor.service systemd unit (SQLite in /var/lib/conveyor, the admin\n"
       "API on 127.0.0.1:8080) and the headers and libraries for embedding the\n"
       "engine and writing plugins.")
# Runtime libraries from dpkg-shlibdeps; adduser for the postinst.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${conveyor_packaging_dir}/postinst
    ${conveyor_packaging_dir}/prerm
    ${conveyor_packaging_dir}/postrm
    ${conveyor_packaging_dir}/conffiles)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# `package_source` (which include(CPack) adds too): the sources, not the
# build directories beside them.
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "/data/" "\\\\.swp$")

include(CPack)
