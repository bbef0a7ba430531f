# install.cmake: what `cmake --install` puts under the prefix (docs/embedding.md): the public
# headers only (the entity, runtime, HTTP and server APIs and the records they use; the store,
# the alarm and tenant indexes and the VFS stay private), the libraries, the `factum`
# executable, and the CMake package `factum` (targets factum::entities, factum::runtime,
# factum::gateway, factum::sink_http, factum::serve; factum::storage, factum::resilience,
# factum::metrics, factum::replication, factum::replication_log, factum::http_client,
# factum::cluster and factum::nats (the outbox's NATS sink) come along as their link
# dependencies; the cluster's and the replication's headers stay private). A pkg-config file
# names the same libraries.
include(CMakePackageConfigHelpers)

set(factum_exported factum_storage factum_entities factum_resilience factum_metrics
    factum_replication factum_replication_log factum_runtime factum_gateway factum_sink_http
    factum_http_client factum_cluster factum_nats factum_serve)
# factum_packaged: everything the packages hold, so that scripts/package builds just that.
add_custom_target(factum_packaged)
add_dependencies(factum_packaged factum ${factum_exported})
foreach(t IN LISTS factum_exported)
  string(REPLACE "factum_" "" export_name ${t})
  set_target_properties(${t} PROPERTIES EXPORT_NAME ${export_name})
endforeach()

install(TARGETS ${factum_exported} EXPORT factumTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(TARGETS factum RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT server)

# The public headers, and nothing else of storage/include.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/entities/include/factum/entities
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/factum COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/runtime/include/factum/runtime/runtime.hpp
              ${PROJECT_SOURCE_DIR}/runtime/include/factum/runtime/ownership.hpp
              ${PROJECT_SOURCE_DIR}/runtime/include/factum/runtime/cluster_router.hpp
              ${PROJECT_SOURCE_DIR}/runtime/include/factum/runtime/connections.hpp
              ${PROJECT_SOURCE_DIR}/runtime/include/factum/runtime/degradation.hpp
              ${PROJECT_SOURCE_DIR}/runtime/include/factum/runtime/outbox.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/factum/runtime COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/metrics/include/factum/metrics/metrics.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/factum/metrics COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/gateway/include/factum/gateway/http_server.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/factum/gateway COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/sinks/http/include/factum/sinks/http_tool.hpp
              ${PROJECT_SOURCE_DIR}/sinks/nats/include/factum/sinks/nats_sink.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/factum/sinks COMPONENT dev)
# status and result<T>, the error type of every API (factum/storage/status.hpp forwards to it).
install(FILES ${PROJECT_SOURCE_DIR}/storage/include/factum/error/status.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/factum/error COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/storage/include/factum/storage/durability.hpp
              ${PROJECT_SOURCE_DIR}/storage/include/factum/storage/entity_key.hpp
              ${PROJECT_SOURCE_DIR}/storage/include/factum/storage/fact.hpp
              ${PROJECT_SOURCE_DIR}/storage/include/factum/storage/fact_ids.hpp
              ${PROJECT_SOURCE_DIR}/storage/include/factum/storage/records.hpp
              ${PROJECT_SOURCE_DIR}/storage/include/factum/storage/status.hpp
              ${PROJECT_SOURCE_DIR}/storage/include/factum/storage/wal_archive.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/factum/storage COMPONENT dev)
install(FILES ${PROJECT_SOURCE_DIR}/tools/serve/include/factum/tools/serve.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/factum/tools COMPONENT dev)
install(FILES ${PROJECT_BINARY_DIR}/generated/include/factum/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/factum COMPONENT dev)

set(factum_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/factum)
install(EXPORT factumTargets NAMESPACE factum:: DESTINATION ${factum_cmake_dir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/factumConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/generated/factumConfig.cmake
                              INSTALL_DESTINATION ${factum_cmake_dir})
# 0.x: a minor release may change the API (docs/embedding.md, "Versions and compatibility").
write_basic_package_version_file(${PROJECT_BINARY_DIR}/generated/factumConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/generated/factumConfig.cmake
              ${PROJECT_BINARY_DIR}/generated/factumConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCAF.cmake
        DESTINATION ${factum_cmake_dir} COMPONENT dev)

configure_file(${PROJECT_SOURCE_DIR}/cmake/factum.pc.in ${PROJECT_BINARY_DIR}/generated/factum.pc
               @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/generated/factum.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# Documentation, with the server package.
install(FILES ${PROJECT_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT server)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}
        COMPONENT server FILES_MATCHING PATTERN "*.md")

# Debian packages (scripts/package): `factum` (the executable and the docs) and `libfactum-dev`
# (headers, static libraries, the CMake package and factum.pc). Each has the copyright file and
# the gzipped changelog of a native package (share/doc/<package>/).
set(factum_changelog ${PROJECT_BINARY_DIR}/generated/changelog)
string(TIMESTAMP factum_changelog_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
file(WRITE ${factum_changelog}
     "factum (${PROJECT_VERSION}) unstable; urgency=medium\n\n"
     "  * Release ${PROJECT_VERSION} (the commit messages hold the changes).\n\n"
     " -- factum maintainers <maintainers@factum.invalid>  ${factum_changelog_date}\n")
file(ARCHIVE_CREATE OUTPUT ${factum_changelog}.gz PATHS ${factum_changelog} FORMAT raw
     COMPRESSION GZip COMPRESSION_LEVEL 9)
foreach(c IN ITEMS server dev)
  set(pkg factum)
  if(c STREQUAL "dev")
    set(pkg libfactum-dev)
  endif()
  install(FILES ${PROJECT_SOURCE_DIR}/cmake/copyright ${factum_changelog}.gz
          DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/doc/${pkg} COMPONENT ${c})
endforeach()
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME factum)
set(CPACK_PACKAGE_VENDOR factum)
set(CPACK_PACKAGE_CONTACT "factum maintainers <maintainers@factum.invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "durable entities on CAF actors, one SQLite database per entity")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL server dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_SERVER_PACKAGE_NAME factum)
set(CPACK_DEBIAN_SERVER_PACKAGE_SECTION database)
set(CPACK_DEBIAN_SERVER_PACKAGE_SHLIBDEPS ON) # dpkg-shlibdeps: libcaf, libsqlite3, libssl ...
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libfactum-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libcaf-dev, libsqlite3-dev, nlohmann-json3-dev, libboost-dev, libssl-dev, libcli11-dev, libhowardhinnant-date-dev, libnats-dev, prometheus-cpp-dev")
set(CPACK_COMPONENT_SERVER_DESCRIPTION "durable entity server: factum serve, inspect, bench")
set(CPACK_COMPONENT_DEV_DESCRIPTION "durable entities: headers, static libraries, CMake package")
include(CPack)
